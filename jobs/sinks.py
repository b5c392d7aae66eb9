"""Where feature rows go: a keyed Kafka topic with JSON values, or stdout (``--print``) for local runs.

Each job declares its output columns once (:class:`Output`); the sink DDL is generated from that
declaration so the topic's JSON fields and the job's SELECT cannot disagree silently (Flink checks the
INSERT against the declared columns when the job is planned).

Delivery (``--sink-guarantee``): ``exactly-once`` by default. Flink's Kafka sink then writes each
checkpoint's rows in one Kafka transaction that commits only when the checkpoint completes, so a
TaskManager lost mid-stream (the job restarts from the last checkpoint and recomputes what followed)
does not leave a window written twice. The price: rows become visible once per checkpoint interval,
and **consumers of the features topic must read with ``isolation.level=read_committed``** (a
``read_uncommitted`` reader sees aborted rows too, i.e. the duplicates this avoids). ``at-least-once``
writes rows as they come (lower latency, no transactions); after a failure, windows between the last
checkpoint and the failure are written again, and consumers must upsert by (key, ``window_start``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.typed_table import kafka_properties, with_clause
from llmpipe.errors import ConfigError

if TYPE_CHECKING:  # annotations only: the Kafka client library is not needed to plan a job
    from llmpipe.kafka_io import KafkaSettings

DEFAULT_FEATURES_TOPIC = "llm.features"

EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
GUARANTEES = (EXACTLY_ONCE, AT_LEAST_ONCE)

DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
"""``transaction.timeout.ms`` of the sink's producers: 15 minutes.

Flink's Kafka sink asks for 1 hour by default, which a broker with the default
``transaction.max.timeout.ms`` (15 minutes) refuses when the first transaction starts. It must also
exceed the longest checkpoint plus the longest outage the job should survive: a transaction the broker
times out before the job recovers is aborted, and its rows are lost.
"""


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
    guarantee: str = EXACTLY_ONCE
    """``exactly-once`` (Kafka transactions per checkpoint) or ``at-least-once``."""
    transactional_id_prefix: str | None = None
    """Prefix of the sink's transactional ids, unique per job on the Kafka cluster (default: from the table)."""
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS

    def __post_init__(self) -> None:
        if self.guarantee not in GUARANTEES:
            msg = f"sink guarantee must be {' or '.join(GUARANTEES)}, not {self.guarantee!r}"
            raise ConfigError(msg)


def sink_options(sink: SinkSettings, output: Output, kafka: KafkaSettings, name: str = "features") -> dict[str, str]:
    """Connector options: JSON value with every column, the entity column as the raw UTF-8 key.

    Exactly-once (the default) writes in Kafka transactions committed on checkpoints: readers of the
    topic must use ``isolation.level=read_committed``, and the job needs checkpointing (without it, rows
    are committed only when a bounded job ends). The transactional ids start with
    :attr:`SinkSettings.transactional_id_prefix` (default ``llmpipe.<name>.<topic>``), which must be unique
    per job on the Kafka cluster and stable across its restarts and upgrades: on start the sink aborts
    the transactions a previous run of the same job left open under that prefix.

    At-least-once: a restarted job may re-emit a window, and consumers upsert by (key, window_start),
    so a repeat overwrites the same value instead of double-counting.
    """
    if sink.print_rows:
        return {"connector": "print"}
    options = {
        "connector": "kafka",
        "topic": sink.topic,
        **kafka_properties(kafka),
        "key.format": "raw",
        "key.fields": output.key,
        "value.format": "json",
        "value.fields-include": "ALL",
        "value.json.timestamp-format.standard": "ISO-8601",
        "sink.delivery-guarantee": sink.guarantee,
    }
    if sink.guarantee == EXACTLY_ONCE:
        options["sink.transactional-id-prefix"] = sink.transactional_id_prefix or f"llmpipe.{name}.{sink.topic}"
        options["properties.transaction.timeout.ms"] = str(sink.transaction_timeout_ms)
    return options


def sink_ddl(name: str, output: Output, sink: SinkSettings, kafka: KafkaSettings) -> str:
    """``CREATE TABLE`` for the feature sink."""
    body = ",\n  ".join(f"`{column}` {sql}" for column, sql in output.columns)
    return f"CREATE TEMPORARY TABLE `{name}` (\n  {body}\n) {with_clause(sink_options(sink, output, kafka, name))}"
