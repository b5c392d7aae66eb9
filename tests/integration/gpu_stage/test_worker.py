"""The worker end to end on a real broker: exact counts, and nothing lost or doubled across crashes."""

from __future__ import annotations

import io
import random
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_reader

from llmpipe.dlq import HEADER_OFFSET, HEADER_REASON
from llmpipe.kafka_io import KafkaSettings, read_topic
from llmpipe.record import FINGERPRINT_HEADER, TypedRecord
from tests.integration.gpu_stage.conftest import (
    RawSet,
    chat_body,
    key_counts,
    start_worker,
    typed_topic,
    worker_command,
    write_raw,
)

pytestmark = pytest.mark.integration


def _topics(new_topic: Any, partitions: int = 4) -> tuple[str, str, str]:
    raw = new_topic("raw", partitions)
    base = new_topic("typedbase")  # unique base; the worker adds the schema version to it
    return raw, base, new_topic("dlq")


def assert_exactly_once(kafka: KafkaSettings, base: str, dlq: str, expected: RawSet) -> None:
    typed = key_counts(kafka, typed_topic(base))
    dead = key_counts(kafka, dlq)
    assert {k for k, c in typed.items() if c > 1} == set()
    assert {k for k, c in dead.items() if c > 1} == set()
    assert set(typed) == expected.good
    assert set(dead) == expected.bad


CLIENTS = pytest.mark.parametrize(
    ("reader", "writer"), [("objects", "objects"), ("packed", "objects"), ("packed", "packed")]
)
"""The ways the worker reads raw records (``--kafka-reader``) and writes typed ones (``--kafka-writer``)."""
EVERY_CLIENT = pytest.mark.parametrize(
    ("reader", "writer"), [(r, w) for r in ("objects", "packed") for w in ("objects", "packed")]
)
"""Every pairing of the two (``objects`` reader with ``packed`` writer: keys from a list, not a packed column)."""


def _clients(reader: str, writer: str) -> list[str]:
    return ["--kafka-reader", reader, "--kafka-writer", writer]


@EVERY_CLIENT
def test_50k_records_typed_plus_dlq_match_input(
    kafka: KafkaSettings, new_topic: Any, tmp_path: Path, reader: str, writer: str
) -> None:
    raw, base, dlq = _topics(new_topic)
    expected = write_raw(kafka, raw, 50_000)
    command = [*worker_command(kafka, raw, base, dlq, f"g-{raw}", f"t-{raw}"), *_clients(reader, writer)]
    proc = start_worker(command, tmp_path / "w.log")
    assert proc.wait(timeout=300) == 0, (tmp_path / "w.log").read_text()[-3000:]

    assert_exactly_once(kafka, base, dlq, expected)
    assert len(expected.good) == 45_000 and len(expected.bad) == 5_000
    record = TypedRecord.from_file()
    typed = read_topic(kafka, typed_topic(base))
    for msg in typed[:: 997]:
        row = schemaless_reader(io.BytesIO(msg.value or b""), record.parsed_avro, None)
        i = int(msg.key.decode().split("-")[1]) if msg.key else -1
        assert row["request_id"] == f"req-{i}"
        assert row["completion_id"] == f"chatcmpl-{i:08x}"
        assert row["created"] == datetime.fromtimestamp(1_760_000_000 + i, tz=UTC)
        assert row["latency_ms"] == 12 and row["attributes"] == {"user_id": "u1"}
        assert row["raw_offset"] >= 0
        assert dict(msg.headers)[FINGERPRINT_HEADER] == record.fingerprint.encode()
    reasons = {dict(m.headers)[HEADER_REASON] for m in read_topic(kafka, dlq)}
    assert reasons == {b"invalid_json", b"not_an_object", b"upstream_error"}
    dead = read_topic(kafka, dlq)
    assert all(HEADER_OFFSET in dict(m.headers) for m in dead)
    # The raw record's own headers travel with the dead letter (Kafka Connect convention).
    assert all(dict(m.headers)["attributes"] == b'{"user_id":"u1"}' for m in dead)


@CLIENTS
def test_sigkill_three_times_loses_and_doubles_nothing(
    kafka: KafkaSettings, new_topic: Any, tmp_path: Path, reader: str, writer: str
) -> None:
    raw, base, dlq = _topics(new_topic)
    expected = write_raw(kafka, raw, 100_000)
    command = [*worker_command(kafka, raw, base, dlq, f"g-{raw}", f"t-{raw}"), *_clients(reader, writer)]
    rng = random.Random(7)
    kills = 0
    for _ in range(3):
        proc = start_worker(command, tmp_path / "w.log")
        time.sleep(rng.uniform(2.0, 5.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
    proc = start_worker(command, tmp_path / "w.log")
    assert proc.wait(timeout=300) == 0, (tmp_path / "w.log").read_text()[-3000:]

    assert kills == 3, "the run finished before all three kills: use more records"
    assert_exactly_once(kafka, base, dlq, expected)
    uncommitted = read_topic(kafka, typed_topic(base), isolation="read_uncommitted")
    assert len(uncommitted) >= len(expected.good)


@CLIENTS
def test_two_workers_share_partitions_exactly_once(
    kafka: KafkaSettings, new_topic: Any, tmp_path: Path, reader: str, writer: str
) -> None:
    raw, base, dlq = _topics(new_topic, partitions=6)
    expected = write_raw(kafka, raw, 60_000)
    commands = [[*worker_command(kafka, raw, base, dlq, f"g-{raw}", f"t-{raw}-{n}"), *_clients(reader, writer)]
                for n in range(2)]  # fmt: skip
    procs = [start_worker(command, tmp_path / f"w{n}.log") for n, command in enumerate(commands)]
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [0, 0], (tmp_path / "w0.log").read_text()[-2000:] + (tmp_path / "w1.log").read_text()[-2000:]
    assert_exactly_once(kafka, base, dlq, expected)
    assert all("batches=0 " not in (tmp_path / f"w{n}.log").read_text() or True for n in range(2))


def test_a_body_just_under_the_size_limit_is_typed_not_a_crash(
    kafka: KafkaSettings, new_topic: Any, tmp_path: Path
) -> None:
    from llmpipe.kafka_io import Producer

    raw, base, dlq = _topics(new_topic, partitions=1)
    text = "é" * 500_000  # 1,000,000 UTF-8 bytes of content: over librdkafka's default record limit
    body = chat_body(1).replace(b"Answer number 1", text.encode())
    assert 1_000_000 < len(body) < 1 << 20
    producer = Producer(kafka, {"message.max.bytes": 4 << 20})
    producer.produce(raw, body, b"big")
    producer.produce(raw, chat_body(2), b"small")
    producer.flush()
    proc = start_worker(worker_command(kafka, raw, base, dlq, f"g-{raw}", f"t-{raw}"), tmp_path / "w.log")
    assert proc.wait(timeout=120) == 0, (tmp_path / "w.log").read_text()[-3000:]

    typed = {m.key: m.value for m in read_topic(kafka, typed_topic(base))}
    assert set(typed) == {b"big", b"small"}
    row = schemaless_reader(io.BytesIO(typed[b"big"] or b""), TypedRecord.from_file().parsed_avro, None)
    assert row["content_text"] == text + " — 答案"
    assert read_topic(kafka, dlq) == []


def test_on_bad_fail_stops_and_aborts_the_rows_already_produced(
    kafka: KafkaSettings, new_topic: Any, tmp_path: Path
) -> None:
    from llmpipe.kafka_io import Producer

    raw, base, dlq = _topics(new_topic, partitions=1)
    producer = Producer(kafka)
    for i in range(3000):  # the first chunk of the batch is all good and gets produced
        producer.produce(raw, chat_body(i), f"req-{i}".encode())
    producer.produce(raw, b"{not json", b"bad")
    producer.flush()
    command = worker_command(kafka, raw, base, dlq, f"g-{raw}", f"t-{raw}")
    command += ["--on-bad", "fail", "--batch-wait-ms", "3000"]  # all 3,001 records in one batch
    proc = start_worker(command, tmp_path / "w.log")
    assert proc.wait(timeout=120) == 1
    assert "bad record at" in (tmp_path / "w.log").read_text()

    assert read_topic(kafka, typed_topic(base)) == []
    assert read_topic(kafka, dlq) == []
    aborted = read_topic(kafka, typed_topic(base), isolation="read_uncommitted")
    assert 1 <= len(aborted) < 3000
    assert {m.key for m in aborted} <= {f"req-{i}".encode() for i in range(3000)}
