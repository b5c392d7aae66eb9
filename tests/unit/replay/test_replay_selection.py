"""Replay selection: filters by reason, stage and time; routing by the source-topic header."""

from __future__ import annotations

import pytest

from llmpipe.dlq import BadRecord, Reason
from llmpipe.errors import ConfigError
from llmpipe.kafka_io import Message
from replay.selection import REPLAY_HEADER, Selection, parse_time, replay_headers


def _message(stage: str, reason: Reason, topic: str, ts: int) -> Message:
    bad = BadRecord(b"v", stage, reason, "e", b"k", topic, 0, 7)
    return Message("llm.dlq", 1, 42, b"k", b"v", [*bad.headers(), ("model", b"m")], ts)


def test_filters() -> None:
    m = _message("gpu_stage", Reason.INVALID_JSON, "llm.raw", 2000)
    assert Selection.build(["invalid_json, too_large"], ["gpu_stage"], None, None, None).matches(m)
    assert not Selection.build(["too_large"], [], None, None, None).matches(m)
    assert not Selection.build([], ["connector"], None, None, None).matches(m)
    assert Selection.build([], [], "2000", "2001", None).matches(m)
    assert not Selection.build([], [], "2001", None, None).matches(m)
    assert not Selection.build([], [], None, "2000", None).matches(m)  # until is exclusive


def test_routing_and_headers() -> None:
    raw = _message("gpu_stage", Reason.INVALID_JSON, "llm.raw", 0)
    from_file = _message("connector", Reason.INVALID_JSON, "/data/prompts.jsonl", 0)
    assert Selection().target(raw) == "llm.raw"
    assert Selection().target(from_file) is None
    assert Selection(target_topic="llm.requests").target(from_file) == "llm.requests"
    assert replay_headers(raw) == [("model", b"m"), (REPLAY_HEADER, b"llm.dlq/1/42")]


def test_times() -> None:
    assert parse_time("2026-01-01T00:00:00") == 1_767_225_600_000
    assert parse_time("2026-01-01T01:00:00+01:00") == 1_767_225_600_000
    assert parse_time("1767225600000") == 1_767_225_600_000
    assert parse_time(None) is None
    with pytest.raises(ConfigError):
        parse_time("yesterday")
