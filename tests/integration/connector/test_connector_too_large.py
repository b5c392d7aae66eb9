"""Replies too large for one Kafka record become ``too_large`` dead letters; the run goes on.

The simulator's ``long`` content scaled up gives bodies of 1.5-3 MB, past the connector's default
record limit (librdkafka's ``message.max.bytes`` default); requests that cap ``max_tokens`` get short
bodies from the same simulator and must still reach ``llm.raw``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from llmpipe import headers as h
from llmpipe import kafka_io
from llmpipe.dlq import HEADER_ERROR, HEADER_OFFSET, HEADER_REASON
from llmpipe.kafka_io import KafkaSettings

from .harness import ROOT, Topics, connector_cmd, simulator

pytestmark = pytest.mark.integration

# connector.records.MAX_RECORD_BYTES and TOO_LARGE_KEEP, written out: importing the connector package
# here would shadow tests/unit/connector (same package name) when both folders are collected.
MAX_RECORD_BYTES = 1_000_000
TOO_LARGE_KEEP = 64 * 1024
HUGE_PROMPT = 1_500_000  # accepted with --max-request-bytes 2 MB, so its dead letter cannot hold it whole


def _line(rid: str, short: bool, prompt: str = "q") -> bytes:
    params = {"max_tokens": 40} if short else {}
    return json.dumps({"request_id": rid, "messages": [{"role": "user", "content": prompt}], "params": params}).encode()


@pytest.mark.timeout(180)
def test_too_large_replies_go_to_dlq_and_the_run_goes_on(
    kafka: KafkaSettings, new_topic: Any, tmp_path: Path
) -> None:
    lines = [_line(f"big-{i}" if i % 3 == 0 else f"ok-{i}", short=i % 3 != 0) for i in range(30)]
    lines.insert(17, _line("big-huge-prompt", short=False, prompt="x" * HUGE_PROMPT))
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    topics = Topics("", new_topic("raw"), new_topic("dlq"))
    state = new_topic("state")
    with simulator("--seed", "4", "--mix", "long=1", "--long-scale", "300") as url:
        cmd = connector_cmd(
            kafka, url, topics, f"big-{topics.raw}", "--input-file", str(path), "--state-topic", state,
            "--max-request-bytes", "2000000",
        )
        first = subprocess.run(cmd, cwd=ROOT, timeout=120, check=False)
        second = subprocess.run(cmd, cwd=ROOT, timeout=120, check=False)
    assert first.returncode == 0 and second.returncode == 0

    raw = kafka_io.read_topic(kafka, topics.raw)
    dlq = kafka_io.read_topic(kafka, topics.dlq)
    keys = sorted([m.key or b"" for m in raw] + [m.key or b"" for m in dlq])
    assert keys == sorted(json.loads(line)["request_id"].encode() for line in lines)  # each exactly once
    assert {m.key for m in raw} == {json.loads(line)["request_id"].encode() for line in lines if b'"ok-' in line}
    assert all(len(m.value or b"") < MAX_RECORD_BYTES for m in raw)

    by_key = {m.key: m for m in dlq}
    original = {json.loads(line)["request_id"].encode(): line for line in lines}
    for key, msg in by_key.items():
        facts = dict(msg.headers)
        assert facts[HEADER_REASON] == b"too_large"
        assert facts[h.HTTP_STATUS] == b"200" and h.LATENCY_MS in facts  # the reply's call facts
        error = facts[HEADER_ERROR].decode()
        assert "response body of" in error and f"record limit of {MAX_RECORD_BYTES}" in error
        assert int(facts[HEADER_OFFSET]) == lines.index(original[key])
        if key == b"big-huge-prompt":  # the request itself does not fit in a dead letter: a prefix
            assert msg.value == original[key][:TOO_LARGE_KEEP]
            assert error.startswith(f"[value: the first {TOO_LARGE_KEEP} of {len(original[key])} bytes")
        else:
            assert msg.value == original[key]
            assert not error.startswith("[value:")
    assert len(by_key) == 11
