"""``bench.lane_share`` names why the device lane leaves each good body, one shape per body."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("numba")

from bench.lane_share import share


def _chat(**changes: Any) -> bytes:
    message = changes.pop("message", {"role": "assistant", "content": "hi"})
    body = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message}],
    }
    return json.dumps(body | changes).encode()


def _call(arguments: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": arguments}}]}


LEFT = {
    "more than one choice": _chat(choices=[{"index": 0, "text": "a"}, {"index": 1, "text": "b"}]),
    "a metadata object": _chat(metadata={"k": "v"}),
    "created not an integer": _chat(created=1.5),
    "a top-level member the lane does not copy into extra: kv_transfer_params": _chat(kv_transfer_params={"a": 1}),
    "a repeated key": b'{"id": "c", "id": "d", "object": "chat.completion", "created": 1, "model": "m", "choices": []}',
    "tool arguments: objects nested more than three deep": _chat(message=_call('{"a": {"b": {"c": {"d": 1}}}}')),
    "tool arguments: a float outside the lane's spellings": _chat(message=_call('{"x": 1e-7}')),
    "tool arguments: a repeated key": _chat(message=_call('{"x": 1, "x": 2}')),
    "content JSON: a repeated key": _chat(message={"content": '{"score": 1, "score": 2}'}),
    "content JSON: a number with more digits or a larger exponent than the lane reads exactly": _chat(
        message={"content": '{"sentiment": "neutral", "score": 0.1234567890123456789, "risk_level": "low"}'}
    ),
}


def test_each_shape_the_lane_leaves_is_named() -> None:
    taken = [
        _chat(message={"content": '{"sentiment": "neutral", "score": 0.30000000000000004, "risk_level": "l\\u006fw"}'})
    ]
    result = share([*LEFT.values(), *taken])
    assert result["left_to_native"] == len(LEFT)
    named = {kind.split(": ", 1)[1]: count for kind, count in result["by_kind"].items()}
    assert named == dict.fromkeys(LEFT, 1)
