"""Which dead letters to replay, and where each one goes.

A dead letter names its source in ``__connect.errors.topic`` (the Kafka Connect convention); a record
from the connector's file input names a file path there, which is not a topic, so it needs an explicit
``--target-topic``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from llmpipe.dlq import HEADER_REASON, HEADER_STAGE, HEADER_TOPIC
from llmpipe.errors import ConfigError
from llmpipe.kafka_io import Message

REPLAY_HEADER = "__replay.from"
"""Added to every replayed record: ``<dlq topic>/<partition>/<offset>``, for audit and loop detection."""

_TOPIC_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def parse_time(text: str | None) -> int | None:
    """Epoch milliseconds from ``1767225600000`` or an ISO-8601 time (UTC when no offset is given)."""
    if text is None or text == "":
        return None
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        msg = f"not a time: {text!r} (epoch ms or ISO-8601)"
        raise ConfigError(msg) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _header(message: Message, name: str) -> str | None:
    for key, value in message.headers:
        if key == name:
            return value.decode("utf-8", "replace")
    return None


@dataclass(frozen=True)
class Selection:
    """Filters on the dead letters; an empty set means "any"."""

    reasons: frozenset[str] = frozenset()
    stages: frozenset[str] = frozenset()
    since_ms: int | None = None
    until_ms: int | None = None
    target_topic: str | None = None

    @classmethod
    def build(cls, reasons: Iterable[str], stages: Iterable[str], since: str | None, until: str | None,
              target_topic: str | None) -> Selection:
        """From command-line values (comma-separated lists are split)."""
        def split(values: Iterable[str]) -> frozenset[str]:
            return frozenset(v.strip() for item in values for v in item.split(",") if v.strip())

        return cls(split(reasons), split(stages), parse_time(since), parse_time(until), target_topic)

    def matches(self, message: Message) -> bool:
        """The record passes every filter (time is the DLQ record's Kafka timestamp, until exclusive)."""
        if self.reasons and _header(message, HEADER_REASON) not in self.reasons:
            return False
        if self.stages and _header(message, HEADER_STAGE) not in self.stages:
            return False
        if self.since_ms is not None and message.timestamp_ms < self.since_ms:
            return False
        return self.until_ms is None or message.timestamp_ms < self.until_ms

    def target(self, message: Message) -> str | None:
        """Topic to re-drive to: the override, else the source topic header when it names a topic."""
        if self.target_topic:
            return self.target_topic
        source = _header(message, HEADER_TOPIC)
        if source and set(source) <= _TOPIC_CHARS and len(source) <= 249:
            return source
        return None


def replay_headers(message: Message) -> list[tuple[str, bytes]]:
    """The original headers minus the dead-letter ones, plus where the record was replayed from."""
    kept = [(k, v) for k, v in message.headers if not k.startswith(("__dlq.", "__connect.errors.", REPLAY_HEADER))]
    return [*kept, (REPLAY_HEADER, f"{message.topic}/{message.partition}/{message.offset}".encode())]
