"""Reading a whole topic to its end, outside any consumer group (verification, replay, state topics)."""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from llmpipe.errors import SourceError
from llmpipe.kafka_io.config import KafkaSettings
from llmpipe.kafka_io.records import Message, _to_message


def read_topic(
    settings: KafkaSettings, topic: str, *, isolation: str = "read_committed", timeout_s: float = 60.0
) -> list[Message]:
    """Read ``topic`` from the beginning to its current end (verification, replay, tests)."""
    consumer = confluent_kafka.Consumer({
        **settings.client_config(),
        "group.id": f"llmpipe-reader-{time.monotonic_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation,
        "enable.partition.eof": True,
    })
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in meta.partitions]
        consumer.assign(parts)
        return _drain(consumer, len(parts), timeout_s)
    finally:
        consumer.close()


def read_latest(settings: KafkaSettings, topic: str, timeout_s: float = 120.0) -> dict[bytes, bytes | None]:
    """The last committed value of every key of ``topic`` (a compacted state topic), read to its true end.

    :func:`read_topic` stops where a ``read_committed`` reader sees the end, the last stable offset:
    a transaction another writer still has open hides every record after its first one, even
    committed ones. A state reader must not take an older record for the latest, so this reads until
    the reader has passed the high watermark taken at the start, waiting for open transactions to end
    (at most the writers' transaction timeout). A ``None`` value is a tombstone.
    """
    consumer = confluent_kafka.Consumer({
        **settings.client_config(),
        "group.id": f"llmpipe-state-{time.monotonic_ns()}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
    })
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None:
            msg = f"cannot read topic {topic}: {meta.error}"
            raise SourceError(msg)
        ends = _high_watermarks(settings, topic, list(meta.partitions))
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in pending])
        latest: dict[bytes, bytes | None] = {}
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                msg = f"reading {topic} did not pass its end offsets {ends} in {timeout_s:.0f}s"
                raise SourceError(msg)
            for record in consumer.consume(10000, 0.2):
                error = record.error()
                if error is None:
                    latest[record.key() or b""] = record.value()
                elif error.code() == KafkaError._PARTITION_EOF:
                    if (record.offset() or 0) >= ends[record.partition() or 0]:
                        pending.discard(record.partition())
                else:
                    msg = f"reading {topic}: {error}"
                    raise SourceError(msg)
        return latest
    except KafkaException as exc:
        msg = f"cannot read topic {topic}: {exc}"
        raise SourceError(msg) from exc
    finally:
        consumer.close()


def _high_watermarks(settings: KafkaSettings, topic: str, partitions: list[int]) -> dict[int, int]:
    """Each partition's high watermark: the end of its log, open transactions included.

    A ``read_committed`` client's watermark query answers the last stable offset instead, so the
    query runs on a ``read_uncommitted`` one.
    """
    config = {**settings.client_config(), "group.id": "llmpipe-watermarks", "isolation.level": "read_uncommitted"}
    consumer = confluent_kafka.Consumer(config)
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        consumer.close()


def _drain(consumer: Any, partitions: int, timeout_s: float) -> list[Message]:
    out: list[Message] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(at_end) < partitions:
        if time.monotonic() > deadline:
            msg = f"reading did not reach the end in {timeout_s}s"
            raise SourceError(msg)
        for msg in consumer.consume(10000, 0.5):
            if msg.error() is None:
                out.append(_to_message(msg))
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
            else:
                raise SourceError(str(msg.error()))
    return out
