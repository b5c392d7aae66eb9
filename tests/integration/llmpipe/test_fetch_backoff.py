"""A consumer whose prefetch queue fills up still reads a backlog whole, at either fetch backoff (real broker)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from bench import fetch_backoff
from bench.e2e_worker import load_raw
from llmpipe.kafka_io import Consumer, KafkaSettings, delete_topics


@pytest.mark.parametrize("backoff_ms", [10, 1000])
def test_a_backlog_past_the_prefetch_limit_is_read_whole_once(kafka: KafkaSettings, backoff_ms: int) -> None:
    """A 256 KiB prefetch limit against ~2.5 MB of records: fetching stops and resumes many times."""
    topic = f"fetch-backoff-{uuid.uuid4().hex[:8]}"
    records = 2_500
    load_raw(kafka, topic, records, partitions=2, pool=500).commit()
    consumer = Consumer(kafka, f"g-{uuid.uuid4().hex[:8]}", [topic], config={"queued.max.messages.kbytes": 256},
                        fetch_backoff_ms=backoff_ms)  # fmt: skip
    try:
        keys: list[bytes | None] = []
        for _ in range(300):
            keys += consumer.consume_records(500, 0.5).keys
            if len(keys) >= records:
                break
    finally:
        consumer.close()
        delete_topics(kafka, [topic])
    assert sorted(keys) == [f"req-{i:09d}".encode() for i in range(records)]  # type: ignore[type-var]


def test_the_fetch_backoff_bench_reads_everything_at_each_backoff(kafka: KafkaSettings, tmp_path: Path) -> None:
    out = tmp_path / "fetch.json"
    argv = ["--bootstrap", kafka.bootstrap, "--records", "25000", "--rounds", "2", "--backoffs", "1000,10",
            "--out", str(out)]  # fmt: skip
    assert fetch_backoff.main(argv) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [(r["round"], r["fetch_backoff_ms"]) for r in runs] == [(0, 1000), (0, 10), (1, 10), (1, 1000)]
    assert all(r["records_per_s"] > 0 for r in runs)
