"""Helpers for the jobs' integration tests: typed records in, feature rows out, reference windows.

The expected values are computed here in plain Python from the same records, including Flink's rule
for late records in event-time windows: a record is counted in window ``[start, end)`` only if, when it
arrives, the watermark (largest ``created`` seen before it minus the delay) is below ``end - 1 ms``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

from jobs.cli import JobSettings
from jobs.flink_env import FlinkSettings, execute
from jobs.sinks import SinkSettings
from jobs.typed_table import EventTime, ReadRange, TopicSource
from llmpipe.kafka_io import KafkaSettings, Producer, read_topic
from llmpipe.record import TypedRecord

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000
DELAY_S = 5
RECORD = TypedRecord.from_file()
FLINK = FlinkSettings(streaming=True, parallelism=1, checkpoint_interval_ms=None)

Window = tuple[int, int]


def at(minutes: int, seconds: int) -> int:
    """Epoch ms of T0 + minutes:seconds."""
    return T0 + minutes * MINUTE + seconds * 1000


def typed_row(**fields: Any) -> dict[str, Any]:
    """A full typed record (every column present, null unless given)."""
    row: dict[str, Any] = dict.fromkeys(RECORD.field_names())
    unknown = set(fields) - set(row)
    assert not unknown, unknown
    row.update(fields)
    return row


def produce_typed(kafka: KafkaSettings, topic: str, rows: Iterable[dict[str, Any]]) -> None:
    """Write rows with fastavro in the order given (one partition: arrival order = list order)."""
    schema = parse_schema(RECORD.avro)
    producer = Producer(kafka)
    for i, row in enumerate(rows):
        buf = io.BytesIO()
        schemaless_writer(buf, schema, {**row, "raw_offset": row.get("raw_offset", i)})
        producer.produce(topic, buf.getvalue(), (row["request_id"] or "").encode())
    producer.flush()


def job_settings(kafka: KafkaSettings, typed: str, features: str, dlq: str | None = None) -> JobSettings:
    """Bounded settings: read the topics from the start to their current end, watermark per record."""
    read = ReadRange(start="earliest", until="latest")
    event_time = EventTime(delay_s=DELAY_S, idle_timeout_s=600, on_event=True)  # no source goes idle early
    dlq_source = TopicSource(kafka, dlq, read, event_time) if dlq else None
    return JobSettings(typed=TopicSource(kafka, typed, read, event_time), sink=SinkSettings(topic=features),
                       flink=FLINK, record=RECORD, dlq=dlq_source)


def run_bounded(t_env: Any, build_job: Callable[[Any, JobSettings], Any], settings: JobSettings) -> None:
    execute(build_job(t_env, settings))


def read_features(kafka: KafkaSettings, topic: str) -> list[tuple[str | None, dict[str, Any]]]:
    """(key, JSON value) of every feature record."""
    return [(None if m.key is None else m.key.decode(), json.loads(m.value or b"null"))
            for m in read_topic(kafka, topic)]


def epoch_ms(iso: str) -> int:
    """Flink's ISO-8601 timestamp text (UTC wall time) as epoch ms."""
    return int(datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp() * 1000)


def tumbling(ts: int, size: int = MINUTE) -> list[Window]:
    start = ts - ts % size
    return [(start, start + size)]


def hopping(ts: int, size: int = 5 * MINUTE, slide: int = MINUTE) -> list[Window]:
    last = ts - ts % slide
    return [(s, s + size) for s in range(last - size + slide, last + slide, slide)]


def counted(
    events: Iterable[tuple[int, Any]], assign: Callable[[int], list[Window]], delay_ms: int = DELAY_S * 1000
) -> Iterator[tuple[Window, Any]]:
    """(window, item) for every event (event time, item) in arrival order that is not late for it."""
    watermark = None
    for ts, item in events:
        for window in assign(ts):
            if watermark is None or watermark < window[1] - 1:
                yield window, item
        watermark = ts - delay_ms if watermark is None else max(watermark, ts - delay_ms)


def share(part: int, whole: int) -> float:
    return part / whole


def assert_row(got: dict[str, Any], want: dict[str, Any], where: object) -> None:
    """Equal column by column; doubles to 1e-12 relative (Flink may add partial sums in another order)."""
    assert set(got) == set(want), where
    for column, value in want.items():
        if isinstance(value, float):
            assert got[column] == pytest.approx(value, rel=1e-12), (where, column)
        else:
            assert got[column] == value, (where, column)
