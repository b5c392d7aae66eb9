"""Where the worker's typed and dead-letter records land: their raw record's partition, or by key."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import pytest

from llmpipe.kafka_io import KafkaSettings, Producer, read_topic
from tests.integration.gpu_stage.conftest import BAD_BODIES, chat_body, start_worker, typed_topic, worker_command

pytestmark = pytest.mark.integration

PARTITIONS = 4
RECORDS = 2_000


def write_off_key(kafka: KafkaSettings, topic: str) -> dict[bytes, int]:
    """Raw records placed round-robin, not by key: each key's raw partition (most differ from its key's hash)."""
    producer = Producer(kafka, {"linger.ms": 20})
    placed = {}
    for i in range(RECORDS):
        key = f"req-{i}".encode()
        value = BAD_BODIES[i % len(BAD_BODIES)] if i % 10 == 9 else chat_body(i)
        producer.produce(topic, value, key, [("latency.ms", b"5")], partition=i % PARTITIONS)
        placed[key] = i % PARTITIONS
    producer.flush()
    return placed


def run_worker(kafka: KafkaSettings, raw: str, base: str, dlq: str, log: Path, *extra: str) -> None:
    command = [*worker_command(kafka, raw, base, dlq, f"g-{base}", f"t-{base}"), *extra]
    proc = start_worker(command, log)
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]


def landed(kafka: KafkaSettings, topic: str) -> dict[bytes, int]:
    """Each key's partition in the committed view of ``topic``."""
    return {m.key: m.partition for m in read_topic(kafka, topic) if m.key is not None}


def key_hash_partition(key: bytes) -> int:
    """librdkafka's default partitioner (``consistent_random``): CRC-32 of the key, modulo the partitions."""
    return zlib.crc32(key) % PARTITIONS


def test_records_go_to_their_raw_records_partition_where_the_counts_match(
    kafka: KafkaSettings, new_topic: Any, tmp_path: Path
) -> None:
    raw, base, dlq = new_topic("raw", PARTITIONS), new_topic("typedbase"), new_topic("dlq", PARTITIONS)
    placed = write_off_key(kafka, raw)
    run_worker(kafka, raw, base, dlq, tmp_path / "w.log")

    typed, dead = landed(kafka, typed_topic(base)), landed(kafka, dlq)
    assert len(typed) == RECORDS * 9 // 10 and len(dead) == RECORDS // 10
    assert {key: placed[key] for key in typed} == typed
    assert {key: placed[key] for key in dead} == dead
    assert sum(placed[key] != key_hash_partition(key) for key in typed) > len(typed) // 2
    assert "records go to their raw record's partition in" in (tmp_path / "w.log").read_text()


def test_by_key_when_asked_or_where_the_counts_differ(kafka: KafkaSettings, new_topic: Any, tmp_path: Path) -> None:
    raw = new_topic("raw", PARTITIONS)
    placed = write_off_key(kafka, raw)
    base, dlq = new_topic("typedbase"), new_topic("dlq", PARTITIONS)
    run_worker(kafka, raw, base, dlq, tmp_path / "key.log", "--partition-by", "key")
    typed, dead = landed(kafka, typed_topic(base)), landed(kafka, dlq)
    assert typed == {key: key_hash_partition(key) for key in typed}
    assert dead == {key: key_hash_partition(key) for key in dead}
    assert sum(placed[key] != partition for key, partition in typed.items()) > len(typed) // 2

    base, one = new_topic("typedbase"), new_topic("dlq", 1)  # one DLQ partition: dead letters by key there
    run_worker(kafka, raw, base, one, tmp_path / "source.log")
    typed = landed(kafka, typed_topic(base))
    assert typed == {key: placed[key] for key in typed} and len(typed) == RECORDS * 9 // 10
    assert set(landed(kafka, one).values()) == {0} and len(landed(kafka, one)) == RECORDS // 10
