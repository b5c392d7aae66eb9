"""PackedWriter against a real broker: rows written from buffers as confluent-kafka would write them,
transactions committed and aborted, offsets committed with either reader's group metadata, fencing."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from confluent_kafka import TopicPartition

from llmpipe.errors import DeliveryError, FencedError
from llmpipe.kafka_io import (
    Consumer,
    KafkaSettings,
    PackedReader,
    PackedWriter,
    TxnAbortable,
    group_offsets,
    read_topic,
)
from tests.integration.llmpipe.txn_testlib import REPORTS

pytestmark = pytest.mark.integration

Seen = list[tuple[int, bytes | None, bytes, list[tuple[str, bytes | None]]]]


def _seen(kafka: KafkaSettings, topic: str, isolation: str = "read_committed") -> Seen:
    """(partition, key, value, headers) of every record, by partition then offset."""
    found = sorted(read_topic(kafka, topic, isolation=isolation), key=lambda m: (m.partition, m.offset))
    return [(m.partition, m.key, m.value or b"", list(m.headers or [])) for m in found]


def _packed(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    ends = np.cumsum([len(x) for x in items], dtype=np.int64)
    return np.frombuffer(b"".join(items) or b"\0", dtype=np.uint8)[: int(ends[-1]) if len(ends) else 0], ends


def _writer(kafka: KafkaSettings, txn: str | None = None) -> PackedWriter:
    return PackedWriter(kafka, txn or f"txn-{uuid.uuid4().hex[:8]}")


def test_rows_are_written_from_the_buffers_with_keys_partitions_and_headers(
    kafka: KafkaSettings, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("pw-rows", partitions=3)
    datums = [("é中" * (i % 7)).encode() + bytes([i % 256]) * (i % 3) for i in range(500)]
    raw_keys = [f"key-{i}".encode() if i % 9 else b"" for i in range(600)]
    key_buf, key_ends = _packed(raw_keys)
    key_null = np.asarray([0 if i % 9 else 1 for i in range(600)], dtype=np.uint8)
    rows = np.arange(0, 600, dtype=np.int64)[np.arange(600) % 6 != 5][:500]  # the good rows of a bigger chunk
    offsets = np.cumsum([0, *map(len, datums)], dtype=np.int64)
    partitions = (rows % 3).astype(np.int64)
    headers = [("llmpipe.typed.fingerprint", b"abc"), ("empty", None)]
    writer = _writer(kafka)
    writer.begin()
    assert writer.produce_rows(topic, b"".join(datums), offsets, (key_buf, key_ends, key_null, rows), headers,
                               partitions, prefix=b"\x00\x00\x00\x00\x07") == 500  # fmt: skip
    writer.commit()

    want = [
        (int(p), None if key_null[r] else raw_keys[r], b"\x00\x00\x00\x00\x07" + d, headers)
        for p, r, d in zip(partitions, rows, datums, strict=True)
    ]  # fmt: skip
    # Each partition holds its rows, in row order.
    assert _seen(kafka, topic) == sorted(want, key=lambda row: row[0])
    assert writer.delivered == 500 and len(writer) == 0


def test_listed_keys_single_records_and_an_aborted_transaction(
    kafka: KafkaSettings, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("pw-list", partitions=2)
    writer = _writer(kafka)
    writer.begin()
    writer.produce_many(topic, [b"a", None, b"ccc"], [b"k1", None, b"k3"], [("h", b"1")], [0, 1, 0])
    writer.produce(topic, b"dead", b"kd", [("reason", b"invalid_json")], 1)
    writer.commit()
    writer.begin()
    writer.produce_rows(topic, b"never", np.asarray([0, 5], dtype=np.int64), [b"kx"], None, None)
    writer.abort()

    assert _seen(kafka, topic) == [
        (0, b"k1", b"a", [("h", b"1")]), (0, b"k3", b"ccc", [("h", b"1")]),
        (1, None, b"", [("h", b"1")]), (1, b"kd", b"dead", [("reason", b"invalid_json")]),
    ]  # fmt: skip
    aborted = [v for _, _, v, _ in _seen(kafka, topic, isolation="read_uncommitted")]
    assert b"never" in aborted


def test_offsets_commit_with_either_readers_group_metadata(kafka: KafkaSettings, new_topic: Callable[..., str]) -> None:
    topic, out = new_topic("pw-in", partitions=2), new_topic("pw-out")
    writer = _writer(kafka)
    writer.begin()
    writer.produce_many(topic, [b"v"] * 10, [f"k{i}".encode() for i in range(10)], None, [i % 2 for i in range(10)])
    writer.commit()
    for kind in ("packed", "objects"):
        group = f"g-{kind}-{uuid.uuid4().hex[:8]}"
        reader: PackedReader | Consumer = (
            PackedReader(kafka, group, [topic]) if kind == "packed" else Consumer(kafka, group, [topic])
        )
        try:
            deadline = time.monotonic() + 30
            while not reader.assignment() and time.monotonic() < deadline:
                reader.consume_records(10, 0.5)  # joins the group
            writer.begin()
            writer.produce_many(out, [kind.encode()], [b"k"])
            writer.send_offsets([TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 5)], reader.group_metadata())
            writer.commit()
            assert group_offsets(kafka, group) == {(topic, 0): 4, (topic, 1): 5}
            stale = reader.group_metadata()
        finally:
            reader.close()
        # The member has left: offsets sent with its metadata are refused, not committed for a stranger.
        writer.begin()
        with pytest.raises(DeliveryError):
            writer.send_offsets([TopicPartition(topic, 0, 9)], stale)
        writer.abort()
        assert group_offsets(kafka, group) == {(topic, 0): 4, (topic, 1): 5}
    assert sorted(v for _, _, v, _ in _seen(kafka, out)) == [b"objects", b"packed"]


def test_a_new_writer_with_the_same_id_fences_the_old_one(kafka: KafkaSettings, new_topic: Callable[..., str]) -> None:
    topic = new_topic("pw-fence")
    txn = f"txn-{uuid.uuid4().hex[:8]}"
    old = _writer(kafka, txn)
    old.begin()
    old.produce_many(topic, [b"from the old one"], [b"k"])
    new = _writer(kafka, txn)  # its epoch ends the old one's transaction
    new.begin()
    new.produce_many(topic, [b"from the new one"], [b"k"])
    new.commit()
    with pytest.raises(FencedError):
        old.commit()
    assert [v for _, _, v, _ in _seen(kafka, topic)] == [b"from the new one"]


@pytest.mark.parametrize("reports", REPORTS.values(), ids=REPORTS.keys())
def test_a_record_the_broker_refuses_fails_the_commit_abortably(
    kafka: KafkaSettings, new_topic: Callable[..., str], reports: dict[str, Any]
) -> None:
    topic = new_topic("pw-refused")
    # librdkafka lets the record through (its own limit is above the broker's 16 MiB); random bytes stay large.
    writer = PackedWriter(kafka, f"refused-{topic}", config={"message.max.bytes": 64 << 20, **reports})
    big = os.urandom(17 << 20)
    writer.begin()
    writer.produce_rows(topic, b"fits" + big, np.asarray([0, 4, 4 + len(big)], dtype=np.int64), [b"k1", b"k2"], None)
    with pytest.raises(TxnAbortable):
        writer.commit()
    writer.abort()
    for _ in range(3):  # the refused record's sequence gap fails the next commit once more (as confluent-kafka's)
        writer.begin()
        writer.produce_many(topic, [b"after"], [b"k3"])
        try:
            writer.commit()
            break
        except TxnAbortable:
            writer.abort()
    else:
        pytest.fail("no transaction committed after the refused one")
    assert [(k, v) for _, k, v, _ in _seen(kafka, topic)] == [(b"k3", b"after")]


def test_bad_buffers_are_refused_before_anything_is_sent(kafka: KafkaSettings, new_topic: Callable[..., str]) -> None:
    topic = new_topic("pw-bad")
    writer = _writer(kafka)
    writer.begin()
    with pytest.raises(ValueError, match="offsets"):
        writer.produce_rows(topic, b"abc", np.asarray([0, 9], dtype=np.int64), None, None, None)
    with pytest.raises(ValueError, match="one key per row"):
        writer.produce_rows(topic, b"abc", np.asarray([0, 3], dtype=np.int64), [b"a", b"b"], None, None)
    with pytest.raises(ValueError, match="packed keys"):
        keys = (np.zeros(1, np.uint8), np.asarray([1], np.int64), np.zeros(1, np.uint8), np.asarray([4], np.int64))
        writer.produce_rows(topic, b"abc", np.asarray([0, 3], dtype=np.int64), keys, None, None)
    writer.commit()
    assert _seen(kafka, topic) == []
