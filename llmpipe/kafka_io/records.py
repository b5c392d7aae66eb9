"""Consumed records detached from librdkafka: one :class:`Message` each, or :class:`Records` as columns."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NamedTuple

import confluent_kafka
from confluent_kafka import TopicPartition

Headers = list[tuple[str, bytes]]
TopicPartitions = list[TopicPartition]


class Message(NamedTuple):
    """A consumed record, detached from librdkafka.

    A named tuple rather than a frozen dataclass: one is built per consumed record, and a frozen
    dataclass's ``__init__`` costs about four times as much (it sets each field through
    ``object.__setattr__``); this is on the worker's hot path.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int


def _to_message(msg: Any) -> Message:
    return Message(
        msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers() or [], msg.timestamp()[1]
    )


_KafkaMessage: Any = confluent_kafka.Message
_second = itemgetter(1)


@dataclass
class Records:
    """Consumed records as columns (one list per attribute, all the same length), in consumption order.

    The batch path's alternative to a list of :class:`Message`: the columns are filled with one
    C-level ``map`` per attribute over librdkafka's messages, without a Python object per record
    (about a quarter of the per-record cost of building ``Message`` tuples), and they are what a
    columnar transform takes as its input. Within one partition, offsets ascend.
    """

    topics: list[str] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[Headers] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)
    nbytes: int = 0
    """Sum of the value sizes."""

    def __len__(self) -> int:
        return len(self.offsets)

    @classmethod
    def of(cls, messages: Sequence[Any], topic: str | None = None) -> Records:
        """Columns of librdkafka messages that carry no error, all from ``topic`` when it is given.

        With ``topic`` the topic column holds that one string object: no string per record to
        decode, and sets and dicts keyed by it hash it once.
        """
        values = list(map(_KafkaMessage.value, messages))
        headers = list(map(_KafkaMessage.headers, messages))
        if None in headers:
            headers = [h or [] for h in headers]
        return cls(
            [topic] * len(messages) if topic is not None else list(map(_KafkaMessage.topic, messages)),
            list(map(_KafkaMessage.partition, messages)),
            list(map(_KafkaMessage.offset, messages)),
            list(map(_KafkaMessage.key, messages)),
            values,
            headers,
            list(map(_second, map(_KafkaMessage.timestamp, messages))),
            sum(map(len, filter(None, values))),
        )

    @classmethod
    def of_messages(cls, messages: Iterable[Message]) -> Records:
        """Columns of detached messages (tests, tools)."""
        out = cls()
        for m in messages:
            out.topics.append(m.topic)
            out.partitions.append(m.partition)
            out.offsets.append(m.offset)
            out.keys.append(m.key)
            out.values.append(m.value)
            out.headers.append(m.headers)
            out.timestamps_ms.append(m.timestamp_ms)
            out.nbytes += len(m.value or b"")
        return out

    def extend(self, other: Records) -> None:
        """Append ``other``'s records."""
        self.topics += other.topics
        self.partitions += other.partitions
        self.offsets += other.offsets
        self.keys += other.keys
        self.values += other.values
        self.headers += other.headers
        self.timestamps_ms += other.timestamps_ms
        self.nbytes += other.nbytes

    def _single_topic(self) -> str | None:
        topics = set(self.topics)
        return topics.pop() if len(topics) == 1 else None

    def partitions_seen(self) -> set[tuple[str, int]]:
        """Every (topic, partition) with a record here."""
        topic = self._single_topic()
        if topic is not None:
            return {(topic, p) for p in set(self.partitions)}
        return set(zip(self.topics, self.partitions, strict=True))

    def without(self, dropped: set[tuple[str, int]]) -> Records:
        """The records whose (topic, partition) is not in ``dropped`` (rebalances: not on the hot path)."""
        keep = [i for i, tp in enumerate(zip(self.topics, self.partitions, strict=True)) if tp not in dropped]
        if len(keep) == len(self):
            return self
        values = [self.values[i] for i in keep]
        return Records(
            [self.topics[i] for i in keep],
            [self.partitions[i] for i in keep],
            [self.offsets[i] for i in keep],
            [self.keys[i] for i in keep],
            values,
            [self.headers[i] for i in keep],
            [self.timestamps_ms[i] for i in keep],
            sum(map(len, filter(None, values))),
        )

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Per (topic, partition), the offset after its last record here."""
        topic = self._single_topic()
        if topic is not None:  # the usual case, without a tuple per record
            last_of = dict(zip(self.partitions, self.offsets, strict=True))
            return {(topic, p): offset + 1 for p, offset in last_of.items()}
        last = dict(zip(zip(self.topics, self.partitions, strict=True), self.offsets, strict=True))
        return {tp: offset + 1 for tp, offset in last.items()}

    def messages(self) -> list[Message]:
        """The records as detached messages."""
        return [
            Message(*row)
            for row in zip(self.topics, self.partitions, self.offsets, self.keys, self.values, self.headers,
                           self.timestamps_ms, strict=True)
        ]
