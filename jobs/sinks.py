"""Where feature rows go: a keyed Kafka topic with JSON values, or stdout (``--print``) for local runs.

Each job declares its output columns once (:class:`Output`); the sink DDL is generated from that
declaration so the topic's JSON fields and the job's SELECT cannot disagree silently (Flink checks the
INSERT against the declared columns when the job is planned).
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.typed_table import kafka_properties, with_clause
from llmpipe.kafka_io import KafkaSettings

DEFAULT_FEATURES_TOPIC = "llm.features"


@dataclass(frozen=True)
class Output:
    """A job's output columns ``(name, SQL type)`` and the column used as the Kafka key."""

    columns: tuple[tuple[str, str], ...]
    key: str

    def names(self) -> list[str]:
        """Column names in order."""
        return [name for name, _ in self.columns]


@dataclass(frozen=True)
class SinkSettings:
    """Kafka topic for features, or stdout when ``print_rows`` is set."""

    topic: str = DEFAULT_FEATURES_TOPIC
    print_rows: bool = False


def sink_options(sink: SinkSettings, output: Output, kafka: KafkaSettings) -> dict[str, str]:
    """Connector options: JSON value with every column, the entity column as the raw UTF-8 key.

    At-least-once delivery: a restarted job may re-emit a window, and consumers upsert by
    (key, window_start), so a repeat overwrites the same value instead of double-counting.
    """
    if sink.print_rows:
        return {"connector": "print"}
    return {
        "connector": "kafka",
        "topic": sink.topic,
        **kafka_properties(kafka),
        "key.format": "raw",
        "key.fields": output.key,
        "value.format": "json",
        "value.fields-include": "ALL",
        "value.json.timestamp-format.standard": "ISO-8601",
        "sink.delivery-guarantee": "at-least-once",
    }


def sink_ddl(name: str, output: Output, sink: SinkSettings, kafka: KafkaSettings) -> str:
    """``CREATE TABLE`` for the feature sink."""
    body = ",\n  ".join(f"`{column}` {sql}" for column, sql in output.columns)
    return f"CREATE TEMPORARY TABLE `{name}` (\n  {body}\n) {with_clause(sink_options(sink, output, kafka))}"
