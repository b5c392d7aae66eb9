"""Helpers for worker tests: raw records with known fates, a worker subprocess, key counting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmpipe.kafka_io import KafkaSettings, Producer, read_topic
from llmpipe.record import TypedRecord

ROOT = Path(__file__).resolve().parents[3]


def chat_body(i: int) -> bytes:
    """A valid chat.completion body; every third one carries JSON content for the default schema."""
    content = (json.dumps({"sentiment": "neutral", "score": (i % 100) / 100, "risk_level": "low"})
               if i % 3 == 0 else f"Answer number {i} — 答案")
    body = {
        "id": f"chatcmpl-{i:08x}", "object": "chat.completion", "created": 1_760_000_000 + i, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop", "stop_reason": None, "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": i % 50, "total_tokens": 10 + i % 50},
    }
    return json.dumps(body, ensure_ascii=False).encode()


BAD_BODIES = (b"{not json", b"[1,2]", b'{"error": {"message": "boom", "type": "InternalServerError", "code": 500}}')


@dataclass
class RawSet:
    """Keys written to the raw topic, split by the fate the worker must give them."""

    good: set[bytes]
    bad: set[bytes]


def write_raw(kafka: KafkaSettings, topic: str, n: int, bad_every: int = 10) -> RawSet:
    """Write ``n`` raw records; every ``bad_every``-th is a body the worker must dead-letter."""
    producer = Producer(kafka, {"linger.ms": 50})
    good: set[bytes] = set()
    bad: set[bytes] = set()
    for i in range(n):
        key = f"req-{i}".encode()
        if i % bad_every == bad_every - 1:
            value = BAD_BODIES[i % len(BAD_BODIES)]
            bad.add(key)
        else:
            value = chat_body(i)
            good.add(key)
        producer.produce(topic, value, key, [("latency.ms", b"12"), ("attributes", b'{"user_id":"u1"}')])
    producer.flush()
    return RawSet(good, bad)


def worker_command(kafka: KafkaSettings, raw: str, typed_base: str, dlq: str, group: str,
                   txn_id: str, idle_s: float = 4.0) -> list[str]:
    """``python -m gpu_stage`` on the CPU backend, exiting when the input stays idle.

    Batches of up to 5,000 records are parsed in chunks of 1,500, so every run overlaps parsing
    with producing inside its transactions.
    """
    return [sys.executable, "-m", "gpu_stage", "--backend", "cpu", "--bootstrap", kafka.bootstrap,
            "--raw-topic", raw, "--typed-topic", typed_base, "--dlq-topic", dlq, "--group-id", group,
            "--transactional-id", txn_id, "--exit-when-idle", str(idle_s), "--batch-records", "5000",
            "--parse-chunk-records", "1500", "--log-level", "INFO"]


STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _kill_leftover_workers() -> Iterator[None]:
    """A test that fails while a worker runs must not leave that worker behind."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def start_worker(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start a worker process writing its log to ``log``."""
    out = open(log, "ab")  # noqa: SIM115 - the child owns the handle for its lifetime
    proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    STARTED.append(proc)
    return proc


def key_counts(kafka: KafkaSettings, topic: str) -> Counter[bytes]:
    """How many times each key appears in the committed view of ``topic``."""
    return Counter(m.key for m in read_topic(kafka, topic) if m.key is not None)


def typed_topic(base: str) -> str:
    """The versioned typed topic the worker writes for the default content schema."""
    return TypedRecord.from_file().versioned_topic(base)
