"""Processes for the connector's integration tests: simulator and connector as real subprocesses.

Only processes started here are stopped, by their own PID.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from llmpipe import kafka_io
from llmpipe.kafka_io import KafkaSettings

ROOT = Path(__file__).resolve().parents[3]


@contextmanager
def simulator(*args: str) -> Iterator[str]:
    """Start ``python -m vllm_sim`` on a free loopback port; yield its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_sim", "--host", "127.0.0.1", "--port", "0", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("READY "), line
        yield line.split()[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sim_counts(url: str) -> dict[str, float]:
    """Simulator responses by status (route chat and chat_stream)."""
    out: dict[str, float] = Counter()
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("vllm_sim_requests_total{"):
            status = line.split('status="')[1].split('"')[0]
            out[status] += float(line.split()[-1])
    return dict(out)


@dataclass
class Topics:
    requests: str
    raw: str
    dlq: str


def connector_cmd(kafka: KafkaSettings, url: str, topics: Topics, txn_id: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "connector",
        "--bootstrap",
        kafka.bootstrap,
        "--url",
        f"{url}/v1/chat/completions",
        "--raw-topic",
        topics.raw,
        "--dlq-topic",
        topics.dlq,
        "--transactional-id",
        txn_id,
        "--log-level",
        "WARNING",
        *extra,
    ]


def start(cmd: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CONNECTOR_API_KEY": "test-secret-key"}
    handle = log.open("ab")
    return subprocess.Popen(list(cmd), cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=env)


def produce_requests(kafka: KafkaSettings, topic: str, ids: Sequence[str]) -> None:
    producer = kafka_io.Producer(kafka)
    for rid in ids:
        line = {"request_id": rid, "messages": [{"role": "user", "content": f"q {rid}"}], "attributes": {"t": "x"}}
        producer.produce(topic, json.dumps(line).encode(), rid.encode())
        producer.poll(0)
    producer.flush()


def write_requests(path: Path, ids: Sequence[str]) -> None:
    """A JSONL input file of one short request per id."""
    lines = (json.dumps({"request_id": rid, "messages": [{"role": "user", "content": "q"}]}) for rid in ids)
    path.write_text("".join(f"{line}\n" for line in lines))


def committed_keys(kafka: KafkaSettings, *topics: str) -> Counter[bytes | None]:
    keys: Counter[bytes | None] = Counter()
    for topic in topics:
        keys.update(m.key for m in kafka_io.read_topic(kafka, topic))
    return keys


def count_committed(kafka: KafkaSettings, *topics: str) -> int:
    """Records visible to read_committed (cheap enough to poll during a run)."""
    return sum(committed_keys(kafka, *topics).values())


def wait_for(kafka: KafkaSettings, topics: Topics, total: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    seen = 0
    while time.monotonic() < deadline:
        seen = count_committed(kafka, topics.raw, topics.dlq)
        if seen >= total:
            return seen
        time.sleep(1.0)
    return seen


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 60) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout_s)
