"""PackedReader against a real broker: the same committed records as confluent-kafka reads, offsets
committed inside a producer's transaction with its group metadata, rebalances, rewind and lag."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import llmpipe_native
import numpy as np
import pytest
from confluent_kafka import TopicPartition

from llmpipe.errors import DeliveryError
from llmpipe.kafka_io import (
    KafkaSettings,
    PackedColumns,
    PackedReader,
    TransactionalProducer,
    group_offsets,
    read_topic,
)

Row = tuple[int, int, bytes | None, bytes, list[tuple[str, bytes | None]], int]


def _rows(columns: list[PackedColumns]) -> list[Row]:
    """(partition, offset, key, value, headers, timestamp) of every record, read from the columns alone."""
    out = []
    for c in columns:
        for i in range(len(c)):
            v0 = int(c.value_ends[i - 1]) if i else 0
            k0 = int(c.key_ends[i - 1]) if i else 0
            key = None if c.key_null[i] else bytes(c.key_buf[k0 : c.key_ends[i]])
            headers = llmpipe_native.headers_at(c.header_buf, c.header_ends, i)
            out.append((int(c.partitions[i]), int(c.offsets[i]), key, bytes(c.value_buf[v0 : c.value_ends[i]]),
                        headers, int(c.timestamps_ms[i])))  # fmt: skip
    return sorted(out, key=lambda r: (r[0], r[1]))


def _read(reader: PackedReader, records: int, max_records: int = 7) -> list[PackedColumns]:
    got: list[PackedColumns] = []
    deadline = time.monotonic() + 30
    while sum(map(len, got)) < records and time.monotonic() < deadline:
        found = reader.consume_packed(max_records, 0.5)
        if found is not None:
            got.append(found)
    return got


def _load(kafka: KafkaSettings, topic: str, rows: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]],
          *, commit: bool = True) -> None:  # fmt: skip
    producer = TransactionalProducer(kafka, f"load-{uuid.uuid4().hex[:8]}")
    producer.begin()
    for i, (key, value, headers) in enumerate(rows):
        producer.produce_many(topic, [value], [key], headers, [i % 2])
    producer.commit() if commit else producer.abort()


Events = list[tuple[str, list[int]]]


def _reader(kafka: KafkaSettings, group: str, topic: str, events: Events | None = None) -> PackedReader:
    def note(kind: str) -> Callable[[list[TopicPartition]], None]:
        return lambda parts: events.append((kind, sorted(tp.partition for tp in parts))) if events is not None else None

    return PackedReader(kafka, group, [topic], on_assign=note("assign"), on_revoke=note("revoke"))


def test_it_reads_every_committed_record_as_confluent_kafka_does(
    kafka: KafkaSettings, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("packed", partitions=2)
    rows = [
        (f"k{i}".encode() if i % 5 else None, ("é中" * i).encode() + b'{"x":1}',
         [("latency.ms", str(i).encode()), ("attributes", b"{}"), ("empty", b"")][: i % 4])
        for i in range(40)
    ]  # fmt: skip
    _load(kafka, topic, rows)
    _load(kafka, topic, [(b"aborted", b"never seen", [])], commit=False)
    _load(kafka, topic, [(b"late", b"", [("model", b"m")])])
    reader = _reader(kafka, f"g-{uuid.uuid4().hex[:8]}", topic)
    try:
        got = _rows(_read(reader, 41))
    finally:
        reader.close()
    want = sorted(((m.partition, m.offset, m.key, m.value or b"", m.headers, m.timestamp_ms)
                   for m in read_topic(kafka, topic)), key=lambda r: (r[0], r[1]))  # fmt: skip
    assert len(want) == 41
    assert got == want
    assert b"aborted" not in {r[2] for r in got}


def test_offsets_commit_in_a_transaction_with_the_members_group_metadata(
    kafka: KafkaSettings, new_topic: Callable[..., str]
) -> None:
    topic, out = new_topic("packed-in", partitions=2), new_topic("packed-out")
    _load(kafka, topic, [(f"k{i}".encode(), b"v", []) for i in range(10)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    reader = _reader(kafka, group, topic)
    producer = TransactionalProducer(kafka, f"txn-{uuid.uuid4().hex[:8]}")
    try:
        columns = _read(reader, 10, max_records=100)
        last = {int(p): int(o) for c in columns for p, o in zip(c.partitions, c.offsets, strict=True)}
        producer.begin()
        producer.produce_many(out, [b"typed"], [b"k"])
        producer.send_offsets([TopicPartition(topic, p, o + 1) for p, o in last.items()], reader.group_metadata())
        producer.commit()
        assert reader.lag() == {(topic, 0): 0, (topic, 1): 0}
        assert group_offsets(kafka, group) == {(topic, p): o + 1 for p, o in last.items()}
        stale = reader.group_metadata()
    finally:
        reader.close()
    # The member has left: offsets sent with its metadata are refused, not committed for a stranger.
    producer.begin()
    with pytest.raises(DeliveryError):
        producer.send_offsets([TopicPartition(topic, 0, 1)], stale)
    producer.abort()


def test_a_second_member_takes_half_and_the_first_hears_of_it(
    kafka: KafkaSettings, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("packed-group", partitions=4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first_events: Events = []
    first = _reader(kafka, group, topic, first_events)
    second_events: Events = []
    second = None
    try:
        deadline = time.monotonic() + 30
        while not first.assignment() and time.monotonic() < deadline:
            first.consume_packed(10, 0.2)
        assert first_events == [("assign", [0, 1, 2, 3])]
        second = _reader(kafka, group, topic, second_events)
        while time.monotonic() < deadline and (len(first.assignment()) != 2 or len(second.assignment()) != 2):
            first.consume_packed(10, 0.1)
            second.consume_packed(10, 0.1)
        owned = sorted(tp.partition for r in (first, second) for tp in r.assignment())
        assert owned == [0, 1, 2, 3]
        revoked = [parts for kind, parts in first_events if kind == "revoke"]
        assert sorted(p for parts in revoked for p in parts) == sorted(tp.partition for tp in second.assignment())
    finally:
        for r in (first, second):
            if r is not None:
                r.close()
    assert second_events[0][0] == "assign"
    assert second_events[-1][0] == "revoke"


def test_rewind_goes_back_to_the_committed_offsets(kafka: KafkaSettings, new_topic: Callable[..., str]) -> None:
    topic = new_topic("packed-rewind", partitions=2)
    _load(kafka, topic, [(f"k{i}".encode(), b"v", []) for i in range(20)])
    reader = _reader(kafka, f"g-{uuid.uuid4().hex[:8]}", topic)
    try:
        first = _rows(_read(reader, 20, max_records=100))
        assert len(first) == 20
        assert reader.lag() == {(topic, 0): 0, (topic, 1): 0}
        reader.rewind_to_committed()  # nothing committed: back to the start
        again = _rows(_read(reader, 20, max_records=100))
    finally:
        reader.close()
    assert again == first
    assert np.all(np.diff([r[1] for r in first if r[0] == 0]) > 0)
