"""Connector end to end: real broker, simulator over loopback HTTP, connector as a subprocess."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llmpipe import headers as h
from llmpipe import kafka_io
from llmpipe.dlq import HEADER_REASON
from llmpipe.kafka_io import KafkaSettings

from .harness import (
    Topics,
    connector_cmd,
    count_committed,
    produce_requests,
    sim_counts,
    simulator,
    start,
    stop,
    wait_for,
)

pytestmark = pytest.mark.integration


def _topics(new_topic: Any, partitions: int = 4) -> Topics:
    return Topics(new_topic("req", partitions), new_topic("raw"), new_topic("dlq"))


def _header(msg: kafka_io.Message, name: str) -> str | None:
    for key, value in msg.headers:
        if key == name:
            return value.decode()
    return None


@pytest.mark.timeout(240)
def test_5000_requests_with_20pct_faults_exactly_once(kafka: KafkaSettings, new_topic: Any, tmp_path: Path) -> None:
    topics = _topics(new_topic)
    ids = [f"req-{i:05d}" for i in range(5000)]
    produce_requests(kafka, topics.requests, ids)
    faults = [
        "--rate-429",
        "0.04",
        "--rate-500",
        "0.04",
        "--rate-503",
        "0.04",
        "--rate-400",
        "0.02",
        "--rate-reset",
        "0.03",
        "--rate-truncate",
        "0.025",
        "--rate-hang",
        "0.005",
        "--retry-after-s",
        "0.2",
        "--hang-s",
        "8",
    ]
    with simulator("--seed", "42", *faults) as url:
        cmd = connector_cmd(
            kafka,
            url,
            topics,
            f"t5k-{topics.raw}",
            "--input-topic",
            topics.requests,
            "--group-id",
            f"g-{topics.raw}",
            # Long enough that a 400 is never timed out on a loaded machine (it would then be retried and
            # counted twice by the simulator); hangs (8 s) still exceed it.
            "--timeout-s",
            "3",
            "--backoff-base-s",
            "0.05",
            "--max-attempts",
            "4",
        )
        proc = start(cmd, tmp_path / "connector.log")
        seen = wait_for(kafka, topics, len(ids), timeout_s=180)
        assert stop(proc) == 0
        served = sim_counts(url)
    raw = kafka_io.read_topic(kafka, topics.raw)
    dlq = kafka_io.read_topic(kafka, topics.dlq)
    keys = Counter(m.key for m in raw + dlq)
    assert seen == len(ids)
    assert set(keys) == {i.encode() for i in ids}
    assert max(keys.values()) == 1
    reasons = Counter(_header(m, HEADER_REASON) for m in dlq)
    assert set(reasons) <= {"http_status", "retries_exhausted"}
    # Every 400 the simulator served became exactly one DLQ record after one call: never retried.
    assert reasons["http_status"] == served.get("400", 0) > 0
    assert all(_header(m, h.HTTP_STATUS) == "400" for m in dlq if _header(m, HEADER_REASON) == "http_status")
    for m in raw:
        body = json.loads(m.value or b"")
        assert body["object"] == "chat.completion"
        assert _header(m, h.HTTP_STATUS) == "200"
        assert json.loads(_header(m, h.ATTRIBUTES) or "") == {"t": "x"}
    assert any(int(_header(m, h.ATTEMPTS) or 0) > 1 for m in raw)
    assert "test-secret-key" not in (tmp_path / "connector.log").read_text()
    print(f"\n5k run: raw={len(raw)} dlq={len(dlq)} reasons={dict(reasons)} served={served}")


@pytest.mark.timeout(300)
def test_sigkill_three_times_then_restart_exactly_once(kafka: KafkaSettings, new_topic: Any, tmp_path: Path) -> None:
    topics = _topics(new_topic)
    total = 20000
    ids = [f"k-{i:05d}" for i in range(total)]
    produce_requests(kafka, topics.requests, ids)
    rng = random.Random(2024)
    log = tmp_path / "connector.log"
    with simulator("--seed", "3", "--ttft-ms", "5", "--rate-500", "0.02") as url:
        cmd = connector_cmd(
            kafka,
            url,
            topics,
            f"kill-{topics.raw}",
            "--input-topic",
            topics.requests,
            "--group-id",
            f"g-{topics.raw}",
            "--backoff-base-s",
            "0.05",
            "--commit-interval-ms",
            "100",
        )
        kills = []
        for round_ in range(3):
            proc = start(cmd, log)
            target = total * rng.uniform(0.2 * round_ + 0.1, 0.2 * round_ + 0.25)
            deadline = time.monotonic() + 90
            # End offsets also count the previous round's aborted records, which can already pass the
            # target: this round must itself write some records (and so commit) before it is killed.
            target = max(target, sum(kafka_io.end_offsets(kafka, topics.raw).values()) + total * 0.05)
            while sum(kafka_io.end_offsets(kafka, topics.raw).values()) < target and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(rng.uniform(0, 0.5))
            proc.kill()
            proc.wait()
            kills.append(count_committed(kafka, topics.raw, topics.dlq))
        proc = start(cmd, log)
        seen = wait_for(kafka, topics, total, timeout_s=200)
        assert stop(proc) == 0
        served = sim_counts(url)
    raw = kafka_io.read_topic(kafka, topics.raw)
    dlq = kafka_io.read_topic(kafka, topics.dlq)
    keys = Counter(m.key for m in raw + dlq)
    missing = {i.encode() for i in ids} - set(keys)
    duplicates = sum(c - 1 for c in keys.values())
    uncommitted = len(kafka_io.read_topic(kafka, topics.raw, isolation="read_uncommitted")) - len(raw)
    calls = sum(served.values())
    print(
        f"\nkill run: committed at kills={kills} final={seen} missing={len(missing)} dup={duplicates} "
        f"aborted_raw_records={uncommitted} http_calls={calls:.0f} for {total} requests "
        f"(repeated={calls - total:.0f}, incl. retries of injected 500s={served.get('500', 0):.0f})"
    )
    # A restarted connector may be killed before its first commit (a crash worth having too), so
    # rounds need not each add committed records; every kill must still land before the end.
    assert 0 < kills[0] <= kills[1] <= kills[2] < total, "the kills must land during the run"
    assert not missing and duplicates == 0
    assert len(raw) + len(dlq) == total
