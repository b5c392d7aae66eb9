"""Final counts and timings, read back from the topics after the run (independent of the stages' logs)."""

from __future__ import annotations

import io
import re
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fastavro import schemaless_reader

from demo.observe import dlq_label
from llmpipe import headers as h
from llmpipe.errors import SourceError
from llmpipe.kafka_io import KafkaSettings, Message, read_topic
from llmpipe.record import TypedRecord


@dataclass(frozen=True)
class Topics:
    """The topics of one demo run."""

    raw: str
    typed: str
    dlq: str
    features: str


@dataclass
class Contents:
    """Everything committed to the run's topics, decoded."""

    raw: list[Message]
    typed: list[dict[str, Any]]
    typed_keys: list[bytes]
    typed_timestamps_ms: list[int]
    dlq: list[Message]

    def dlq_by_label(self) -> Counter[tuple[str, str]]:
        """Dead letters by (stage, reason)."""
        return Counter(dlq_label(m) for m in self.dlq)


def epoch_ms(value: Any) -> int | None:
    """A decoded ``timestamp-millis`` (aware datetime) as epoch ms."""
    return None if value is None else int(value.timestamp() * 1000) if isinstance(value, datetime) else int(value)


def read_all(kafka: KafkaSettings, topics: Topics, record: TypedRecord) -> Contents:
    """Read raw, typed and DLQ to their end with ``read_committed`` and decode the typed values."""
    schema = record.parsed_avro
    typed_messages = read_topic(kafka, topics.typed, timeout_s=120)
    typed = [schemaless_reader(io.BytesIO(m.value or b""), schema, None) for m in typed_messages]
    return Contents(
        raw=read_topic(kafka, topics.raw, timeout_s=120),
        typed=[row for row in typed if isinstance(row, dict)],
        typed_keys=[m.key or b"" for m in typed_messages],
        typed_timestamps_ms=[m.timestamp_ms for m in typed_messages],
        dlq=read_topic(kafka, topics.dlq, timeout_s=120),
    )


def header_int(message: Message, name: str) -> int | None:
    """An ASCII-decimal header as int, None when absent or unreadable."""
    for key, value in message.headers:
        if key == name:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def sent_at_ms(raw: list[Message]) -> dict[bytes, int]:
    """When each request was first sent: the connector's receive time minus the whole call's latency."""
    out = {}
    for m in raw:
        received, latency = header_int(m, h.RECEIVED_AT_MS), header_int(m, h.LATENCY_MS)
        if received is not None and latency is not None:
            out[m.key or b""] = received - latency
    return out


def percentiles(values: Sequence[float], points: tuple[int, ...] = (50, 95, 99)) -> dict[int, float]:
    """Nearest-rank percentiles (empty input gives an empty dict)."""
    ordered = sorted(values)
    if not ordered:
        return {}
    return {p: ordered[min(len(ordered) - 1, max(0, -(-p * len(ordered) // 100) - 1))] for p in points}


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)$")


def scrape(url: str) -> dict[str, float]:
    """A Prometheus text endpoint as ``name{labels}`` → value."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError as exc:
        msg = f"cannot scrape {url}: {exc}"
        raise SourceError(msg) from exc
    out = {}
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found:
            out[found.group(1) + (found.group(2) or "")] = float(found.group(3))
    return out
