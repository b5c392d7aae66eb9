"""``CREATE TABLE`` statements for the topics the feature jobs read, generated from :class:`TypedRecord`.

The typed table's columns come from the same definition that gpu_stage encodes with, so the Avro schema
Flink derives from this DDL is byte-for-byte the writer schema (design §3): there is no hand-copied DDL
to drift. Everything else here is the Kafka source contract a job needs: committed reads only
(gpu_stage writes in transactions), an event-time watermark on ``created``, idle partitions that do not
stall windows, and where to start and stop reading.

Watermark bound. vLLM sets ``created`` once, in whole seconds, when the request *arrives*; the record
reaches ``llm.typed`` only after the completion is generated. So within a partition ``created`` is out
of order by the spread of request latencies (seconds to tens of seconds for long generations) plus up
to 999 ms of truncation, and records of the same second tie. The default bound is therefore
:data:`DEFAULT_WATERMARK_DELAY_S` = 30 s: it covers a completion of ~1,500 tokens at 50 tokens/s
started in the same second as a short one, and delays one-minute results by half a window, which
feature consumers tolerate. Anything later than the bound is late and dropped by the window; raise
the bound (``--watermark-delay``) for slower models rather than adding allowed lateness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import unquote, urlsplit, urlunsplit

from llmpipe.errors import ConfigError
from llmpipe.kafka_io import KafkaSettings
from llmpipe.record import TypedRecord
from llmpipe.settings import Secret

DEFAULT_WATERMARK_DELAY_S = 30
DEFAULT_IDLE_TIMEOUT_S = 30

_STARTUP = {"earliest": "earliest-offset", "latest": "latest-offset", "group": "group-offsets"}
_JAAS = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@dataclass(frozen=True)
class ReadRange:
    """Where a Kafka source starts and stops.

    ``start``: ``earliest``, ``latest``, ``group`` (committed offsets of ``group_id``) or an epoch-ms
    timestamp given as ``timestamp:<ms>``. ``until``: ``none`` (streaming forever), ``latest`` (the
    end offsets seen at start: a bounded backfill) or ``timestamp:<ms>``.
    """

    start: str = "group"
    until: str = "none"
    group_id: str | None = None

    def options(self) -> dict[str, str]:
        """``scan.startup.*`` and ``scan.bounded.*`` connector options."""
        opts = _startup(self.start)
        opts.update(_bounded(self.until))
        if self.group_id:
            opts["properties.group.id"] = self.group_id
        elif opts["scan.startup.mode"] == "group-offsets":
            msg = "start=group needs a consumer group id"
            raise ConfigError(msg)
        if opts["scan.startup.mode"] == "group-offsets":
            opts["properties.auto.offset.reset"] = "earliest"
        return opts


def _timestamp_ms(spec: str, what: str) -> str:
    value = spec.removeprefix("timestamp:")
    if not value.isdigit():
        msg = f"{what}: expected timestamp:<epoch ms>, got {spec!r}"
        raise ConfigError(msg)
    return value


def _startup(start: str) -> dict[str, str]:
    if start in _STARTUP:
        return {"scan.startup.mode": _STARTUP[start]}
    if start.startswith("timestamp:"):
        return {"scan.startup.mode": "timestamp",
                "scan.startup.timestamp-millis": _timestamp_ms(start, "start")}
    msg = f"start: expected earliest, latest, group or timestamp:<ms>, got {start!r}"
    raise ConfigError(msg)


def _bounded(until: str) -> dict[str, str]:
    if until == "none":
        return {}
    if until == "latest":
        return {"scan.bounded.mode": "latest-offset"}
    if until.startswith("timestamp:"):
        return {"scan.bounded.mode": "timestamp",
                "scan.bounded.timestamp-millis": _timestamp_ms(until, "until")}
    msg = f"until: expected none, latest or timestamp:<ms>, got {until!r}"
    raise ConfigError(msg)


@dataclass(frozen=True)
class EventTime:
    """Watermark settings of an event-time source.

    ``on_event`` emits a watermark after every record instead of every 200 ms: the same input then
    drops the same late records on every run (tests, backfills), at some cost in throughput.
    """

    delay_s: int = DEFAULT_WATERMARK_DELAY_S
    idle_timeout_s: int = DEFAULT_IDLE_TIMEOUT_S
    on_event: bool = False

    def options(self) -> dict[str, str]:
        """Per-table watermark options (FLIP-296)."""
        return {
            "scan.watermark.idle-timeout": f"{self.idle_timeout_s} s",
            "scan.watermark.emit.strategy": "on-event" if self.on_event else "on-periodic",
        }

    def clause(self, column: str) -> str:
        """``WATERMARK FOR`` clause: bounded out-of-orderness of :attr:`delay_s` seconds."""
        return f"WATERMARK FOR `{column}` AS `{column}` - INTERVAL '{self.delay_s}' SECOND"


@dataclass(frozen=True)
class TopicSource:
    """One Kafka topic read by a job: connection, topic, range and event time."""

    kafka: KafkaSettings
    topic: str
    read: ReadRange = field(default_factory=ReadRange)
    event_time: EventTime = field(default_factory=EventTime)
    schema_registry_url: str | None = field(default=None, repr=False)
    """Values in the Confluent wire format, writer schemas from this registry (``avro-confluent``); None:
    plain Avro datums (``avro``). Not in the repr: its user info may hold a password."""


KAFKA_PASSWORD_PLACEHOLDER = "<KAFKA_SASL_PASSWORD>"
REGISTRY_PASSWORD_PLACEHOLDER = "<SCHEMA_REGISTRY_PASSWORD>"


def without_secrets(source: TopicSource) -> TopicSource:
    """``source`` with its passwords replaced by placeholders, for DDL that is printed or kept in files.

    A job's own DDL carries the real values (Flink needs them); DDL shown to a person or written to an
    init file must not, so it says where each password goes instead.
    """
    kafka = source.kafka
    if kafka.sasl_password:
        kafka = replace(kafka, sasl_password=Secret(KAFKA_PASSWORD_PLACEHOLDER))
    url = source.schema_registry_url
    parts = urlsplit(url) if url else None
    if parts is not None and parts.password is not None:
        netloc = f"{parts.username}:{REGISTRY_PASSWORD_PLACEHOLDER}@{parts.netloc.rsplit('@', 1)[1]}"
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return replace(source, kafka=kafka, schema_registry_url=url)


def quote(value: str) -> str:
    """A SQL string literal (single quotes doubled), so option values can never break the DDL."""
    return "'" + value.replace("'", "''") + "'"


def with_clause(options: Mapping[str, str]) -> str:
    """``WITH (...)`` for a connector's options, one per line in a stable order."""
    body = ",\n  ".join(f"{quote(k)} = {quote(v)}" for k, v in options.items())
    return f"WITH (\n  {body}\n)"


def kafka_properties(kafka: KafkaSettings) -> dict[str, str]:
    """The Java client's ``properties.*`` for our connection settings (librdkafka names differ)."""
    props = {
        "properties.bootstrap.servers": kafka.bootstrap,
        "properties.security.protocol": kafka.security_protocol,
    }
    mechanism = kafka.sasl_mechanism
    if mechanism:
        if mechanism not in _JAAS:
            msg = f"SASL mechanism {mechanism!r} is not supported by the Flink jobs"
            raise ConfigError(msg)
        user = (kafka.sasl_username or "").replace('"', '\\"')
        password = kafka.sasl_password.reveal().replace('"', '\\"')
        props["properties.sasl.mechanism"] = mechanism
        props["properties.sasl.jaas.config"] = (
            f'{_JAAS[mechanism]} required username="{user}" password="{password}";'
        )
    if kafka.ssl_ca_location:
        props["properties.ssl.truststore.type"] = "PEM"
        props["properties.ssl.truststore.location"] = kafka.ssl_ca_location
    return props


def source_options(source: TopicSource, value_format: str) -> dict[str, str]:
    """Kafka source options: committed reads only, watermarks, range."""
    return {
        "connector": "kafka",
        "topic": source.topic,
        **kafka_properties(source.kafka),
        "properties.isolation.level": "read_committed",
        **source.read.options(),
        **source.event_time.options(),
        "format": value_format,
    }


def typed_format_options(source: TopicSource) -> dict[str, str]:
    """The typed table's value format: ``avro``, or ``avro-confluent`` with the source's schema registry.

    ``avro-confluent`` reads the writer schema's id from each value and fetches that schema from the
    registry; the reader schema is still the one derived from the DDL. User info in the URL becomes the
    format's basic-auth options (the registry client would otherwise send the URL as given).
    """
    if not source.schema_registry_url:
        return {"format": "avro"}
    parts = urlsplit(source.schema_registry_url)
    options = {"format": "avro-confluent"}
    if parts.username is None:
        options["avro-confluent.url"] = source.schema_registry_url
        return options
    host = parts.netloc.rsplit("@", 1)[1]
    options["avro-confluent.url"] = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    options["avro-confluent.basic-auth.credentials-source"] = "USER_INFO"
    options["avro-confluent.basic-auth.user-info"] = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return options


def typed_table_ddl(name: str, record: TypedRecord, source: TopicSource) -> str:
    """``CREATE TABLE`` for the typed topic: the record's columns, its value format, watermark on created."""
    columns = [*record.ddl_columns(), source.event_time.clause("created")]
    body = ",\n  ".join(columns)
    value_format = typed_format_options(source)
    options = {**source_options(source, value_format.pop("format")), **value_format}
    return f"CREATE TEMPORARY TABLE `{name}` (\n  {body}\n) {with_clause(options)}"


DLQ_COLUMNS: Sequence[str] = (
    "`value` BYTES",
    "`headers` MAP<STRING, BYTES> METADATA FROM 'headers'",
    "`kafka_ts` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL",
    "`dlq_partition` INT METADATA FROM 'partition' VIRTUAL",
    "`dlq_offset` BIGINT METADATA FROM 'offset' VIRTUAL",
    "`event_time` AS CAST(`kafka_ts` AS TIMESTAMP(3))",
)
"""Dead letters: the original bytes and the headers; event time is the DLQ record's Kafka timestamp.

``event_time`` is ``TIMESTAMP(3)`` (UTC wall time; the TableEnvironment runs in UTC) so that it can be
unioned with the typed table's ``created``.
"""


def dlq_table_ddl(name: str, source: TopicSource) -> str:
    """``CREATE TABLE`` for the DLQ topic: ``raw`` value, headers and Kafka timestamp as metadata."""
    columns = [*DLQ_COLUMNS, source.event_time.clause("event_time")]
    body = ",\n  ".join(columns)
    return f"CREATE TEMPORARY TABLE `{name}` (\n  {body}\n) {with_clause(source_options(source, 'raw'))}"
