"""The device lane (compiled for the CPU) on JSON strings' whole: every escape, at both levels.

Real model output quotes, breaks lines and writes non-ASCII as ``\\u`` escapes inside the JSON it
puts in ``content`` and in tool arguments; gateways and Python's ``json.dumps`` escape the body
itself. The lane takes all of it; each test checks the row against values computed here, from the
Python objects the bodies were made of, and against the native core byte for byte.
"""

from __future__ import annotations

import json
from typing import Any

import fastavro
import orjson
import pytest

pytest.importorskip("numba")

from test_gpu_stage_lane import WIDE, _row, _run

from gpu_stage import synth
from gpu_stage.transform.device.executor import CpuExecutor
from gpu_stage.transform.device.lane import LaneTransform
from gpu_stage.transform.native import NativeBackend

# Every escape JSON has, and text that is spelled with them: quotes, backslashes, controls,
# non-ASCII in the BMP and above it (a surrogate pair when escaped), U+2028 and DEL.
PIECES = ['say "hi"', "C:\\temp\\", "a/b", "\b\f\n\r\t", "\x00\x01\x1f\x7f", "é", "订单延迟", "😀", "\u2028", "'"]
TOPICS = ["".join(PIECES[k:] + PIECES[:k]) for k in range(len(PIECES))]


def _chat(content: str | None, ascii_body: bool, arguments: str | None = None) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": TOPICS[3]}
    if arguments is not None:
        message["tool_calls"] = [{"id": "t", "type": "function", "function": {"name": "f😀", "arguments": arguments}}]
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {"id": 'id "1"\n', "object": "chat.completion", "created": 1700000000, "model": "m/é", "choices": [choice]}
    return json.dumps(body, ensure_ascii=ascii_body).encode()


def _parse(values: list[bytes]) -> tuple[int, list[dict[str, Any]]]:
    """Rows the lane took, and every good row decoded (the lane's and the native core's bytes agree)."""
    lane, native = LaneTransform(WIDE, CpuExecutor), NativeBackend(WIDE)
    batch = synth.batch(values)
    taken, good = _run(lane, native, batch)
    encoded = native.parse(batch).encoded
    schema = fastavro.parse_schema(WIDE.record.avro)
    return taken, [_row(encoded, k, schema) for k in range(good)]


@pytest.mark.parametrize("ascii_content", [False, True])
@pytest.mark.parametrize("ascii_body", [False, True])
@pytest.mark.parametrize("indent", [None, 2])
def test_escapes_in_the_body_and_in_the_contents_json_are_taken(
    ascii_body: bool, ascii_content: bool, indent: int | None
) -> None:
    assessments = [
        {"sentiment": "negative", "score": 0.25, "risk_level": "high", "topics": TOPICS[k : k + 3]}
        for k in range(len(TOPICS))
    ]
    values = [_chat(json.dumps(a, ensure_ascii=ascii_content, indent=indent), ascii_body) for a in assessments]
    taken, rows = _parse(values)
    assert taken == len(rows) == len(values)
    for row, assessment in zip(rows, assessments, strict=True):
        assert row["content_valid"] is True
        assert row["content"]["topics"] == assessment["topics"]
        assert (row["completion_id"], row["model"], row["reasoning"]) == ('id "1"\n', "m/é", TOPICS[3])


def test_an_escaped_enum_value_is_compared_decoded() -> None:
    contents = [
        '{"sentiment": "neg\\u0061tive", "score": 1, "risk_level": "l\\u006fw"}',
        '{"sentiment": "negative\\u0000", "score": 1, "risk_level": "low"}',
        '{"sentiment": "neutral", "score": 1, "risk_level": "low\\n"}',
    ]
    taken, rows = _parse([_chat(c, ascii_body=False) for c in contents])
    assert taken == len(contents)
    assert rows[0]["content"]["sentiment"] == "negative" and rows[0]["content"]["risk_level"] == "low"
    assert [r["content_error"] for r in rows[1:]] == ["enum:sentiment", "enum:risk_level"]


def test_a_lone_surrogate_in_the_contents_json_makes_it_invalid_json() -> None:
    taken, rows = _parse([_chat('{"sentiment": "\\ud800", "score": 1, "risk_level": "low"}', ascii_body=True)])
    assert taken == 1
    assert (rows[0]["content_valid"], rows[0]["content_error"]) == (False, "invalid_json")


# Tool arguments the lane writes as orjson's compact JSON text: nesting, escapes, integers, floats
# already in their shortest spelling (trailing zeros aside), literals.
COMPACT_ARGUMENTS = [
    '{"q": "say \\"hi\\"\\n", "path": "C:\\\\t\\/x", "n": -0, "k": 12}',
    '{"city": "M\\u00fcnchen \\ud83d\\ude00", "ctl": "\\u0001\\u001f\\u007f\\u2028", "ok": true, "none": null}',
    '{ "lat" : 52.520, "lon": -13.40500, "zero": 0.0, "neg": -0.0, "small": 0.00012, "big": 1000000000000000.0 }',
    '{"filters": {"tags": ["a", "b\\tc"], "range": {"from": 1, "to": [2, 3.5]}}, "ids": [[1], [], {}]}',
    '{"x": 100.0, "y": 123456789012345.0, "z": 0.0001, "w": 1.0}',
    '{"k\\u0065y": {"k\\u0065y": 1, "\\n": 2}, "key2": "\\"", "\\u00e9": 3}',
    '{}',
    '\n {"a": [ ] }\t',
]
# Tool arguments outside the lane's subset: the native core's rows.
NATIVE_ARGUMENTS = [
    '{"a": {"b": {"c": {"d": 1}}}}',  # objects nested four deep
    '{"a": {"x": 1, "x": 2}}',  # a repeated key: the last value wins, at the first position
    '{"x": 1, "\\u0078": 2}',  # the same key, spelled twice
    '{"x": 1e-7, "y": 1.5e3}',  # floats spelled with an exponent
    '{"x": 0.1234567890123456}',  # more digits than a double keeps exactly
    '{"x": 0.00001}',  # below 1e-4
    '{"x": 12345678901234567890}',  # beyond 64 bits
    '{"k": "\\u00e9 \\n", "x": 1.5e3}',  # outside the subset after part of the text was rewritten
]
# Tool arguments that are no JSON object: kept as sent, not valid.
AS_SENT_ARGUMENTS = ['{"city": "Par', '{"a": 1} {"b": 2}', "[1, 2]", "", "call me", '{"a": 1,}']
AS_SENT_ARGUMENTS += [
    # not JSON, found after part of the text was rewritten (an escape respelled, spaces dropped)
    '{"k": "\\u00e9 \\n", "n": [1, 2,]}',
    '{ "a" : {"b": "\\t"} } x',
    '{"a": 1, "b": }',
    '{"a": 01}',
    '{"a": [}',
    '{"a": {"b": 1]}',
    '{"a": 1 "b": 2}',
    '{"a" 1}',
    '{"a": truex}',
    '{"a": -}',
    '{"a": "\\ud800"}',
    '{"a": 1}}',
]


def test_tool_arguments_are_compact_json_in_orjsons_spelling() -> None:
    values = [_chat(None, ascii_body=k % 2 == 0, arguments=a) for k, a in enumerate(COMPACT_ARGUMENTS)]
    taken, rows = _parse(values)
    assert taken == len(values)
    expected = [orjson.dumps(json.loads(a)).decode() for a in COMPACT_ARGUMENTS]
    assert [r["tool_arguments"] for r in rows] == expected
    assert all(r["tool_arguments_valid"] is True and r["tool_name"] == "f😀" for r in rows)


def test_tool_arguments_that_are_no_object_are_kept_as_sent() -> None:
    values = [_chat("", ascii_body=True, arguments=a) for a in AS_SENT_ARGUMENTS]
    taken, rows = _parse(values)
    assert taken == len(values)
    assert [(r["tool_arguments"], r["tool_arguments_valid"]) for r in rows] == [(a, False) for a in AS_SENT_ARGUMENTS]


def test_tool_arguments_outside_the_subset_are_the_native_cores() -> None:
    values = [_chat("x", ascii_body=False, arguments=a) for a in NATIVE_ARGUMENTS]
    taken, rows = _parse(values)
    assert taken == 0
    assert [r["tool_arguments"] for r in rows] == [orjson.dumps(json.loads(a)).decode() for a in NATIVE_ARGUMENTS]


def _repeats(text: str) -> bool:
    """Reference: whether an object of the JSON ``text`` has a key twice, by the standard library's pair hook."""
    found = []
    json.loads(text, object_pairs_hook=lambda pairs: found.append(len(pairs) != len(dict(pairs))) or dict(pairs))
    return any(found)


def _many_keys(count: int, depth: int) -> dict[str, Any]:
    """An object of ``count`` distinct keys (more than 64, so some share a key bit), nested ``depth`` deep."""
    inner: dict[str, Any] = {f"k{j}é": (j if j % 3 else f'v"{j}"') for j in range(count)}
    for level in range(depth - 1):
        inner = {f"k{j}é": j for j in range(count // 2)} | {"in": inner, "after": level}
    return inner


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_many_distinct_keys_are_taken_and_a_late_repeat_is_not(depth: int) -> None:
    # 100 keys in an object: at least two of them share one of the 64 key bits, and must still count as new.
    distinct = json.dumps(_many_keys(100, depth), ensure_ascii=False)
    repeated_last = distinct[:-1] + ', "k1é": 1}'  # the outermost object repeats a key after all the others
    repeated_inner = distinct.replace('"k99é": ', '"k98é": 0, "k99é": ', 1)  # the innermost object repeats one
    assert [_repeats(a) for a in (distinct, repeated_last, repeated_inner)] == [False, True, True]
    for ascii_body in (False, True):
        taken, rows = _parse([_chat(None, ascii_body, arguments=distinct)])
        assert taken == 1
        assert rows[0]["tool_arguments"] == orjson.dumps(json.loads(distinct)).decode()
        taken, rows = _parse([_chat(None, ascii_body, arguments=a) for a in (repeated_last, repeated_inner)])
        assert taken == 0
        assert [r["tool_arguments"] for r in rows] == [
            orjson.dumps(json.loads(a)).decode() for a in (repeated_last, repeated_inner)
        ]
