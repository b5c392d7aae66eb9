"""Pass 2's spans (compiled for the CPU): a row's long strings noted by its thread, copied after it a warp a row.

With ``write_spans`` the thread that writes a row leaves each string of at least ``SPAN_MIN`` bytes
(up to that many a row) to a span, and ``copy_spans`` (the warp build's) copies them: the output
must be the native core's whatever the number of spans, the pieces and the row order, and each
span must name its string's text and place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("numba")

from test_gpu_stage_native import _assert_same

from bench import escape_corpus, real_corpus
from gpu_stage import synth
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.device import slots
from gpu_stage.transform.device.executor import CpuExecutor, Executor
from gpu_stage.transform.device.lane import LaneTransform
from gpu_stage.transform.native import NativeBackend
from llmpipe.record import TypedRecord

WIDE = TransformSettings(max_record_bytes=1 << 20)


@pytest.fixture(scope="module")
def lanes() -> dict[str, LaneTransform]:
    """The lane with a thread per row, in ``balanced`` and in ``arrival`` order, compiled for the CPU."""
    return {order: LaneTransform(replace(WIDE, lane_order=order), CpuExecutor) for order in ("balanced", "arrival")}


def _bodies(kind: str, seed: int) -> list[bytes]:
    made = real_corpus.generate(2000, seed=seed) if kind == "real" else escape_corpus.escape_bodies(2000, seed)
    return made.values


class _Spans:
    """The executor's span copies, recorded: each call's spans and its output after the copy."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.calls: list[tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int, int, np.ndarray]] = []
        self._copy = executor.copy_spans  # type: ignore[attr-defined]

    def __call__(self, dec: Any, spans: Any, starts: Any, first: int, last: int, lo: int, hi: int, out: Any) -> None:
        self._copy(dec, spans, starts, first, last, lo, hi, out)
        self.calls.append((dec.copy(), spans.copy(), starts.copy(), first, last, lo, hi, out.copy()))


@contextmanager
def _recorded(executor: Executor) -> Iterator[_Spans]:
    recorder = _Spans(executor)
    executor.copy_spans = recorder  # type: ignore[attr-defined]
    try:
        yield recorder
    finally:
        executor.copy_spans = recorder._copy  # type: ignore[attr-defined]


@contextmanager
def _with(executor: Executor, **knobs: int) -> Iterator[None]:
    own = {name: getattr(executor, name) for name in knobs}
    for name, value in knobs.items():
        setattr(executor, name, value)
    try:
        yield
    finally:
        for name, value in own.items():
            setattr(executor, name, value)


@pytest.mark.parametrize("order", ["balanced", "arrival"])
@pytest.mark.parametrize("spans", [0, 1, slots.SPANS])
@pytest.mark.parametrize("piece_bytes", [0, 64 << 10])
@pytest.mark.parametrize("kind", ["real", "escapes"])
def test_pass_2_with_spans_gives_the_native_cores_bytes(
    lanes: dict[str, LaneTransform], kind: str, piece_bytes: int, spans: int, order: str
) -> None:
    """Real-shaped bodies and bodies full of escapes (decoded by the copy), in one piece and in 64 KiB ones."""
    batch = synth.batch(_bodies(kind, 21), first_offset=7)
    lane = lanes[order]
    with _with(lane.executor, write_spans=spans, write_piece_bytes=piece_bytes):
        _assert_same(NativeBackend(WIDE).parse(batch), lane.parse(batch))


@pytest.mark.parametrize("spans", [1, slots.SPANS])
@pytest.mark.parametrize("kind", ["real", "escapes"])
def test_each_span_names_its_strings_text_and_place(lanes: dict[str, LaneTransform], kind: str, spans: int) -> None:
    """Every span is a string of at least ``SPAN_MIN`` bytes, at most ``spans`` a row, whose bytes the copy
    put where the span says, taken from where it says; on real-shaped bodies the spans carry most of
    the output (89 % with eight a row)."""
    batch = synth.batch(_bodies(kind, 22), first_offset=7)
    lane = lanes["balanced"]
    with _with(lane.executor, write_spans=spans, write_piece_bytes=64 << 10), _recorded(lane.executor) as recorder:
        lane.parse(batch)
    assert len(recorder.calls) > 1  # one per piece
    noted = escaped = output = 0
    for dec, table, starts, first, last, lo, hi, out in recorder.calls:
        output += hi - lo
        assert table.shape[1] == slots.span_columns(spans)
        for r in range(first, last):
            if not lo <= starts[r] < hi:
                continue
            count = int(table[r, 0])
            assert 0 <= count <= spans
            for k in range(count):
                at = slots.SPAN_FIRST + 3 * k
                s, q, length = (int(v) for v in table[r, at : at + 3])
                assert starts[r] - lo < q < hi - lo
                if length < 0:
                    escaped += 1
                    length = ~length
                    assert length >= slots.SPAN_MIN
                    continue  # decoded by the copy: its text is checked by the bytes test above
                assert length >= slots.SPAN_MIN
                assert out[q : q + length].tobytes() == dec[s : s + length].tobytes()
                noted += length
    # A chat row's first long string is its id; with every span, its content (twice) and the rest.
    assert noted > (0 if spans == 1 or kind == "escapes" else 3 * output // 4)
    assert escaped == 0  # the default schema's strings are enums: no content string is long


# A content schema with free text: its long strings, escapes and all, are decoded by the copy.
FREE_TEXT = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "notes": {"type": "array", "items": {"type": "string"}}},
    "required": ["summary"],
}
SUMMARIES = [
    r'a quote \" and a backslash \\ and a newline \n in a sentence long enough for a span',
    r"non-ASCII written as escapes: na\u00efve r\u00e9sum\u00e9, \u4e2d\u6587 and \ud83d\ude00 too",
    r"plain words only, long enough to be a span of its own and copied a warp a row",
    r"short \t one",
    r"tabs\tand\tslashes\/and\rreturns\r\n" * 4,
]


def free_text_chat(summary: str, k: int) -> bytes:
    """A chat completion whose content is :data:`FREE_TEXT` JSON, its summary (and one note) ``summary``."""
    content = '{"summary": "' + summary + '", "notes": ["' + summary + '"]}'
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {"id": f"chatcmpl-{k:08d}", "object": "chat.completion", "created": 1700000000 + k, "model": "m",
            "choices": [choice]}  # fmt: skip
    return json.dumps(body, ensure_ascii=False).encode()


@pytest.mark.parametrize("spans", [1, 2, slots.SPANS])
def test_escaped_content_strings_are_decoded_by_the_copy(spans: int) -> None:
    """A content property's long string goes to a span with its escapes, and the copy decodes them."""
    settings = replace(WIDE, record=TypedRecord(FREE_TEXT))
    bodies = [free_text_chat(SUMMARIES[k % len(SUMMARIES)], k) for k in range(200)]
    batch = synth.batch(bodies, first_offset=3)
    lane = LaneTransform(settings, CpuExecutor)
    with _with(lane.executor, write_spans=spans), _recorded(lane.executor) as recorder:
        _assert_same(NativeBackend(settings).parse(batch), lane.parse(batch))
    assert lane.taken_rows == len(bodies)
    ((_, table, _, *_),) = recorder.calls
    lengths = [int(table[r, slots.SPAN_FIRST + 3 * k + 2]) for r in range(len(bodies)) for k in range(table[r, 0])]
    escaped = [~v for v in lengths if v < 0]
    if spans == slots.SPANS:  # past the id and the content twice: the summary, decoded
        assert len(escaped) >= len(bodies) * 3 // 5
        assert min(escaped) >= slots.SPAN_MIN
    else:
        assert escaped == []


def test_no_spans_leaves_one_column_and_copies_nothing(lanes: dict[str, LaneTransform]) -> None:
    """``write_spans`` 0: the thread writes every byte itself, and no copy is launched."""
    batch = synth.batch(_bodies("real", 23), first_offset=7)
    lane = lanes["balanced"]
    with _with(lane.executor, write_spans=0), _recorded(lane.executor) as recorder:
        _assert_same(NativeBackend(WIDE).parse(batch), lane.parse(batch))
    assert recorder.calls == []


def test_span_columns_hold_three_a_span_after_the_count() -> None:
    assert slots.span_columns(0) == 1
    assert slots.span_columns(1) == 1 + 3
    assert slots.span_columns(slots.SPANS) == 1 + 3 * slots.SPANS
