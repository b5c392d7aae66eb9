"""The device lane's first choice: message, delta and text in every order, against the native core.

A message is read where it stands, and so is a text that comes before any message or delta; one
that comes later takes the content column back. Whatever the order of a choice's members, the lane
(compiled for the CPU) must write the native core's bytes and dead letters, and take the good rows.
"""

from __future__ import annotations

import itertools
import json

import pytest

pytest.importorskip("numba")

from gpu_stage_testlib import decode_all
from test_gpu_stage_native import _assert_same

from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.batch import RawBatch
from gpu_stage.transform.device.executor import CpuExecutor
from gpu_stage.transform.device.lane import LaneTransform
from gpu_stage.transform.native import NativeBackend

SETTINGS = TransformSettings()
LANE = LaneTransform(SETTINGS, CpuExecutor)
NATIVE = NativeBackend(SETTINGS)
HOLDERS = {
    "message": ['{"role": "assistant", "content": "from the message"}', '{"role": "assistant"}', "null",
                '{"content": "{\\"sentiment\\": \\"positive\\", \\"score\\": 0.5}", "reasoning_content": "hm"}'],
    "delta": ['{"content": "from the delta"}', "{}", "null"],
    "text": ['"from the text \\u6c49"', "null", "17"],
}  # fmt: skip


def _body(members: list[tuple[str, str]]) -> bytes:
    choice = ", ".join([f'"{key}": {value}' for key, value in members] + ['"index": 0', '"finish_reason": "stop"'])
    return (
        '{"id": "cmpl-1", "object": "chat.completion", "created": 1700000000, "model": "m", '
        f'"choices": [{{{choice}}}], "usage": {{"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}}}'
    ).encode()


def _bodies() -> list[bytes]:
    """Every order of one to three of the holders, each holder with each of its values."""
    out = []
    for count in (1, 2, 3):
        for keys in itertools.permutations(HOLDERS, count):
            for values in itertools.product(*(HOLDERS[k] for k in keys)):
                out.append(_body(list(zip(keys, values, strict=True))))
    return out


def test_the_bodies_are_json() -> None:
    bodies = _bodies()
    assert len(bodies) > 200
    for body in bodies:
        json.loads(body)


def test_every_order_of_message_delta_and_text_gives_the_native_cores_bytes() -> None:
    batch = RawBatch.of_values(_bodies())
    before = (LANE.taken_rows, LANE.rows)
    _assert_same(NATIVE.parse(batch), LANE.parse(batch))
    taken, rows = LANE.taken_rows - before[0], LANE.rows - before[1]
    not_strings = sum(1 for body in _bodies() if b'"text": 17' in body)
    assert taken >= rows - not_strings  # only a text that is not a string may be left to the native core


@pytest.mark.parametrize(
    ("members", "text"),
    [
        ([("text", '"t"'), ("message", '{"role": "assistant"}')], None),  # the message's (none), not the text's
        ([("text", '"t"'), ("message", "null")], None),
        ([("text", '"t"'), ("delta", '{"content": "d"}')], "d"),
        ([("message", '{"content": "m"}'), ("text", '"t"')], "m"),
        ([("text", '"t"')], "t"),
    ],
)
def test_the_text_column_comes_from_the_holder_that_wins(members: list[tuple[str, str]], text: str | None) -> None:
    batch = RawBatch.of_values([_body(members)])
    native, lane = NATIVE.parse(batch), LANE.parse(batch)
    _assert_same(native, lane)
    assert decode_all(lane, SETTINGS.record)[0]["content_text"] == text
