"""python -m replay on a real broker: killed midway once, run again twice → each selected record exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from llmpipe.dlq import BadRecord, Reason
from llmpipe.kafka_io import KafkaSettings, Producer, read_topic

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
N = 300


def _dead_letters(kafka: KafkaSettings, dlq: str, source: str) -> dict[str, bytes]:
    """N dead letters: invalid_json and too_large from gpu_stage (source topic), http_status from a file."""
    producer = Producer(kafka)
    selected = {}
    for i in range(N):
        key, value = f"k{i:04d}", f"body-{i}".encode()
        if i % 3 == 2:
            bad = BadRecord(value, "connector", Reason.HTTP_STATUS, "HTTP 400", key.encode(), "/data/in.jsonl", 0, i)
        else:
            reason = Reason.INVALID_JSON if i % 3 == 0 else Reason.TOO_LARGE
            bad = BadRecord(value, "gpu_stage", reason, "bad body", key.encode(), source, i % 4, i)
            selected[key] = value
        producer.produce(dlq, bad.raw, bad.key, [*bad.headers(), ("http.status", b"200")])
    producer.flush()
    return selected


def _replay(kafka: KafkaSettings, dlq: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "replay", "--bootstrap", kafka.bootstrap, "--dlq-topic", dlq,
            "--stage", "gpu_stage", "--reason", "invalid_json,too_large", "--group-id", f"{dlq}-g",
            "--transactional-id", f"{dlq}-t", *extra]


def _committed(kafka: KafkaSettings, topic: str) -> list[str]:
    return [(m.key or b"").decode() for m in read_topic(kafka, topic)]


def test_replay_exactly_once_across_a_kill_and_reruns(kafka: KafkaSettings, new_topic: Callable[..., str]) -> None:
    dlq, source = new_topic("dlq", 2), new_topic("raw", 4)
    selected = _dead_letters(kafka, dlq, source)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    dry = subprocess.run([*_replay(kafka, dlq, "--dry-run")], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=120, check=False)
    assert dry.returncode == 0, dry.stderr
    assert f"would replay {len(selected)}" in dry.stdout
    assert _committed(kafka, source) == []

    slow = subprocess.Popen(_replay(kafka, dlq, "--batch-records", "10", "--max-records-per-s", "60"),
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while len(_committed(kafka, source)) < 30 and time.monotonic() < deadline:
        time.sleep(0.2)
    slow.send_signal(signal.SIGKILL)
    slow.wait()
    after_kill = len(_committed(kafka, source))
    assert 30 <= after_kill < len(selected), after_kill

    for _ in range(2):
        done = subprocess.run(_replay(kafka, dlq), capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=180, check=False)
        assert done.returncode == 0, done.stdout + done.stderr

    assert "replayed 0" in done.stdout  # the second full run found nothing left
    records = read_topic(kafka, source)
    counts = Counter((m.key or b"").decode() for m in records)
    assert counts == Counter(set(selected)), "every selected record exactly once, nothing else"
    for m in records:
        names = [k for k, _ in m.headers]
        assert m.value == selected[(m.key or b"").decode()]
        assert "__replay.from" in names and not any(n.startswith(("__dlq.", "__connect.errors.")) for n in names)
        assert ("http.status", b"200") in m.headers
