"""The one module that talks to Kafka (confluent-kafka / librdkafka).

Everything else depends on the small types here. Produce is never fire-and-forget: a record sent
with ``produce`` has a delivery callback, the first failure is kept, and ``flush``/``commit`` raise it
as a ``DeliveryError``; records sent inside a transaction with ``TransactionalProducer.produce_many``
are confirmed by the transaction's commit instead (see there). Transaction errors are classified the
way librdkafka documents them: retriable → call again, abortable → abort and rewind, fatal (fenced) →
stop.
"""

from __future__ import annotations

import argparse
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple, Protocol, TypeVar

import confluent_kafka
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from llmpipe.errors import ConfigError, DeliveryError, FencedError, SourceError
from llmpipe.settings import Secret, env_option, non_negative_float

log = logging.getLogger(__name__)
rdkafka_log = logging.getLogger("librdkafka")
T = TypeVar("T")

REPEAT_WINDOW_S = 60.0
"""librdkafka retries a lost broker every few hundred milliseconds and logs every attempt; the same
line (numbers aside) is let through once, then once more per this window with its count."""


class RepeatFilter(logging.Filter):
    """Lets a log line through when it differs from the previous one (its digits ignored), else once a window.

    An outage then reads as a few lines, one per change of state ("connect failed", "timed out",
    back up), not thousands; a repeat that is let through says how often it was held back.
    """

    def __init__(self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._last: str | None = None
        self._since = 0.0
        self._held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """True to emit ``record``; a repeat inside the window is held back and counted."""
        shape = _DIGITS.sub("#", record.getMessage())
        now = self._clock()
        if shape == self._last and now - self._since < self.window_s:
            self._held += 1
            return False
        if shape == self._last and self._held:
            record.msg = f"{record.getMessage()} (the same {self._held} more times in {now - self._since:.0f}s)"
            record.args = ()
        self._last, self._since, self._held = shape, now, 0
        return True


_DIGITS = re.compile(r"\d+")
rdkafka_log.addFilter(RepeatFilter())
log.addFilter(RepeatFilter())  # this module's own retry warnings (consume errors, transaction retries)


class DemotedLog:
    """A librdkafka ``logger`` that passes every line on at DEBUG.

    For a client whose failures its caller reports in its own words (a start-up wait, a probe):
    librdkafka's lines about the same failure would only repeat them, at ERROR.
    """

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def log(self, level: int, msg: str, *args: Any) -> None:
        """Log ``msg % args`` at DEBUG, whatever ``level`` librdkafka gave it."""
        del level
        self._logger.debug(msg, *args)


Headers = list[tuple[str, bytes]]
COMPRESSIONS = ("none", "lz4", "zstd", "snappy", "gzip")
"""librdkafka's ``compression.type`` values."""
TopicPartitions = list[TopicPartition]


@dataclass(frozen=True)
class KafkaSettings:
    """Connection settings shared by every client of one service."""

    bootstrap: str = "127.0.0.1:19092"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret = field(default_factory=lambda: Secret(""))
    ssl_ca_location: str | None = None
    compression: str = "lz4"
    """What this service's producers compress record batches with (``compression.type``). lz4 saves
    network and broker disk for little CPU; ``none`` saves this client's compressing and the
    consumers' decompressing but costs the broker more per record (1.7 times as much with a broker on the same
    host), so it pays only where the broker has CPU to spare."""
    extra: Mapping[str, str] = field(default_factory=dict)
    wait_s: float = 30.0
    """How long a service waits at start for a cluster that does not answer before it gives up
    with one line (see :func:`await_cluster`); once running, an outage is ridden out instead."""

    def __post_init__(self) -> None:
        if self.compression not in COMPRESSIONS:
            msg = f"compression must be one of {', '.join(COMPRESSIONS)}, not {self.compression!r}"
            raise ConfigError(msg)

    def client_config(self) -> dict[str, Any]:
        """Librdkafka configuration, made at the edge (the secret is revealed only here)."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.security_protocol,
            "logger": rdkafka_log,
        }
        optional = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "ssl.ca.location": self.ssl_ca_location,
        }
        config.update({k: v for k, v in optional.items() if v})
        if self.sasl_password:
            config["sasl.password"] = self.sasl_password.reveal()
        config.update(self.extra)
        return config

    @staticmethod
    def add_options(parser: argparse.ArgumentParser, prefix: str) -> None:
        """Add ``--bootstrap`` and security options falling back to ``<prefix>_*``/``KAFKA_*`` env vars."""
        group = parser.add_argument_group("Kafka")
        env_option(group, "--bootstrap", "KAFKA_BOOTSTRAP", default="127.0.0.1:19092",
                   help="Kafka bootstrap servers")
        env_option(group, "--security-protocol", "KAFKA_SECURITY_PROTOCOL", default="PLAINTEXT",
                   help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
        env_option(group, "--sasl-mechanism", "KAFKA_SASL_MECHANISM",
                   help="SASL mechanism (PLAIN, SCRAM-SHA-512…)")
        env_option(group, "--sasl-username", "KAFKA_SASL_USERNAME", help="SASL user name")
        env_option(group, "--sasl-password", "KAFKA_SASL_PASSWORD", help="SASL password", shown="secret")
        env_option(group, "--ssl-ca-location", "KAFKA_SSL_CA_LOCATION", help="CA bundle for SSL")
        env_option(group, "--compression", "KAFKA_COMPRESSION", default="lz4", choices=COMPRESSIONS,
                   help="compression of the record batches this service produces (none: no CPU spent on it "
                   "here or in consumers, more in the broker)")
        env_option(group, "--kafka-wait-s", "KAFKA_WAIT_S", default=30.0, type=non_negative_float,
                   help="at start, how long to wait for a Kafka cluster that does not answer before exiting")
        del prefix

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> KafkaSettings:
        """Build from options added by :meth:`add_options`."""
        return cls(
            bootstrap=args.bootstrap,
            security_protocol=args.security_protocol,
            sasl_mechanism=args.sasl_mechanism,
            sasl_username=args.sasl_username,
            sasl_password=Secret(args.sasl_password or ""),
            ssl_ca_location=args.ssl_ca_location,
            compression=args.compression,
            wait_s=args.kafka_wait_s,
        )


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


# --------------------------------------------------------------------------------------------- admin


def admin(settings: KafkaSettings) -> AdminClient:
    """An AdminClient for ``settings``."""
    return AdminClient(settings.client_config())


def wait_ready(settings: KafkaSettings, timeout_s: float = 60.0) -> None:
    """Block until the cluster answers a metadata request, or raise ``SourceError``."""
    deadline = time.monotonic() + timeout_s
    client = admin(settings)
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            client.list_topics(timeout=2)
            return
        except KafkaException as exc:
            last = exc
            time.sleep(0.2)
    msg = f"Kafka at {settings.bootstrap} not ready after {timeout_s:.0f}s"
    raise SourceError(msg) from last


def await_cluster(settings: KafkaSettings, timeout_s: float | None = None, *, say: bool = True) -> None:
    """Wait until the cluster answers; one line when it does not at once, one clear error when it never does.

    Refused credentials end the wait at once with a ``ConfigError`` naming the address and the user
    (retrying cannot fix them); an address that does not answer within ``timeout_s`` is a
    ``SourceError`` naming it. librdkafka's own retry lines are collapsed by :class:`RepeatFilter`.
    """
    refused: list[KafkaError] = []

    def on_error(error: KafkaError) -> None:
        if error.code() in _AUTH_ERRORS:
            refused.append(error)

    # Its own lines say why it waits and why it gives up: librdkafka's connect failures go to DEBUG.
    config: dict[str, Any] = {**settings.client_config(), "error_cb": on_error, "logger": DemotedLog(rdkafka_log)}
    client = AdminClient(config)
    timeout_s = settings.wait_s if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    waiting = False
    while True:
        try:
            client.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            if waiting:
                log.info("Kafka at %s answers", settings.bootstrap)
            return
        except KafkaException as exc:
            client.poll(0.1)  # serves the error callback
            if refused:
                raise ConfigError(_auth_message(settings, refused[0])) from exc
            if time.monotonic() >= deadline:
                msg = f"cannot reach Kafka at {settings.bootstrap} within {timeout_s:.0f}s ({exc.args[0].str()})"
                raise SourceError(msg) from exc
            if say and not waiting:
                reason = exc.args[0].str()
                log.warning("waiting for Kafka at %s (up to %.0fs): %s", settings.bootstrap, timeout_s, reason)
            waiting = True
            time.sleep(0.2)


_AUTH_ERRORS = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                          KafkaError._SSL})  # fmt: skip


def _auth_message(settings: KafkaSettings, error: KafkaError) -> str:
    who = f" as {settings.sasl_username!r}" if settings.sasl_username else ""
    how = " ".join(part for part in (settings.security_protocol, settings.sasl_mechanism) if part)
    return f"Kafka at {settings.bootstrap} refused the connection{who} ({how}): {error.str()}"


def require_topic(settings: KafkaSettings, topic: str, option: str, timeout_s: float = 30.0) -> int:
    """The partition count of ``topic``; a ``ConfigError`` naming the topic and ``option`` when it does not exist."""
    client = admin(settings)
    try:
        found = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except KafkaException as exc:
        msg = f"cannot read the metadata of topic {topic} at Kafka {settings.bootstrap}: {exc.args[0].str()}"
        raise SourceError(msg) from exc
    if found is None or found.error is not None or not found.partitions:
        msg = f"{option} {topic}: no such topic at Kafka {settings.bootstrap}"
        raise ConfigError(msg)
    return len(found.partitions)


def create_topics(
    settings: KafkaSettings, topics: Mapping[str, int], config: Mapping[str, str] | None = None
) -> None:
    """Create topics (name → partitions); existing ones are left as they are."""
    client = admin(settings)
    new = [NewTopic(name, num_partitions=parts, replication_factor=1, config=dict(config or {}))
           for name, parts in topics.items()]
    for name, future in client.create_topics(new, operation_timeout=30).items():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                msg = f"cannot create topic {name}: {exc}"
                raise ConfigError(msg) from exc


def delete_topics(settings: KafkaSettings, names: Sequence[str]) -> None:
    """Delete topics, ignoring ones that do not exist."""
    client = admin(settings)
    for future in client.delete_topics(list(names), operation_timeout=30).values():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise DeliveryError(str(exc)) from exc


_COORDINATOR_MOVING = frozenset(
    {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS}
)
"""Answers while a group's coordinator is being chosen or loaded (a fresh cluster creates the offsets
topic on the first group request): asked again until the timeout."""


def group_members(settings: KafkaSettings, group: str, timeout_s: float = 10.0) -> tuple[str, list[int]]:
    """A consumer group's state (``STABLE``, ``PREPARING_REBALANCE``, …) and each member's partition count."""
    client = admin(settings)  # held until the answer is in: a dropped client never completes its futures
    deadline = time.monotonic() + timeout_s
    while True:
        future = client.describe_consumer_groups([group], request_timeout=timeout_s)[group]
        try:
            described = future.result(timeout=timeout_s + 5)
            break
        except KafkaException as exc:
            if exc.args[0].code() in _COORDINATOR_MOVING and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            msg = f"cannot describe consumer group {group}: {exc}"
            raise SourceError(msg) from exc
        except TimeoutError as exc:
            msg = f"cannot describe consumer group {group}: {exc}"
            raise SourceError(msg) from exc
    members = [len(m.assignment.topic_partitions) if m.assignment else 0 for m in described.members]
    return described.state.name, members


def group_offsets(settings: KafkaSettings, group: str, timeout_s: float = 10.0) -> dict[tuple[str, int], int]:
    """A consumer group's committed offsets (the next offset to read) per topic partition."""
    client = admin(settings)  # held until the answer is in
    request = [ConsumerGroupTopicPartitions(group)]
    future = client.list_consumer_group_offsets(request, request_timeout=timeout_s)[group]
    try:
        answer = future.result(timeout=timeout_s + 5)
    except (KafkaException, TimeoutError) as exc:
        msg = f"cannot list the offsets of consumer group {group}: {exc}"
        raise SourceError(msg) from exc
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.offset >= 0}


def end_offsets(settings: KafkaSettings, topic: str) -> dict[int, int]:
    """High watermark per partition (for lag and for reading a topic to its end)."""
    consumer = confluent_kafka.Consumer({**settings.client_config(), "group.id": "llmpipe-watermarks"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None:
            raise SourceError(str(meta.error))
        marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                 for p in meta.partitions}
        return {p: high for p, (_low, high) in marks.items()}
    finally:
        consumer.close()


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


# ------------------------------------------------------------------------------------------ producer


_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
ANY_PARTITION = -1
"""No partition chosen: librdkafka's partitioner picks one from the key."""


class Producer:
    """A producer whose deliveries are all confirmed: ``flush`` raises the first failure."""

    def __init__(self, settings: KafkaSettings, config: Mapping[str, Any] | None = None) -> None:
        base = {"enable.idempotence": True, "linger.ms": 20, "compression.type": settings.compression}
        self._config = {**settings.client_config(), **base, **dict(config or {})}
        self._client = confluent_kafka.Producer(self._config)
        self._error: KafkaError | None = None
        self.delivered = 0
        self.purged = 0

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None and err.code() in _PURGED:
            self.purged += 1
        elif err is not None:
            if self._error is None:
                self._error = err
            log.error("delivery failed topic=%s[%s]: %s", msg.topic(), msg.partition(), err)
        else:
            self.delivered += 1

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
        partition: int = ANY_PARTITION,
    ) -> None:
        """Enqueue one record (to ``partition``, else where its key hashes to); waits while the local queue is full.

        Waiting serves delivery callbacks.

        A record librdkafka refuses outright (e.g. larger than ``message.max.bytes``) raises
        ``DeliveryError``, so callers never see a confluent-kafka exception type.
        """
        while True:
            try:
                self._client.produce(
                    topic, value, key, partition, self._on_delivery, headers=headers  # type: ignore[arg-type]
                )
                return
            except BufferError:
                self._client.poll(0.05)
            except KafkaException as exc:
                msg = f"cannot produce to {topic}: {exc.args[0]}"
                raise DeliveryError(msg) from exc

    def poll(self, timeout: float = 0.0) -> None:
        """Serve delivery callbacks."""
        self._client.poll(timeout)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait for every enqueued record; raise ``DeliveryError`` if any failed or is still queued."""
        remaining = self._client.flush(timeout_s)
        self.raise_for_error()
        if remaining:
            msg = f"{remaining} records still undelivered after {timeout_s}s"
            raise DeliveryError(msg)

    def raise_for_error(self) -> None:
        """Raise the first delivery failure seen, once."""
        if self._error is not None:
            err, self._error = self._error, None
            msg = f"delivery failed: {err}"
            raise DeliveryError(msg)

    def __len__(self) -> int:
        return len(self._client)

    @property
    def client(self) -> Any:
        """The librdkafka producer (for the transactional wrapper)."""
        return self._client


class TxnAbortable(DeliveryError):
    """The current transaction must be aborted and the input rewound; the producer stays usable."""


class TxnTimedOut(DeliveryError):
    """Commit/abort outcome unknown: recreate the producer so a new epoch fences stale requests."""


def _classify(exc: KafkaException, action: str) -> DeliveryError:
    err: KafkaError = exc.args[0]
    text = f"{action} failed: {err}"
    if err.fatal() or err.code() == KafkaError._FENCED:
        return FencedError(text)
    if err.txn_requires_abort():
        return TxnAbortable(text)
    if err.retriable() or err.code() == KafkaError._TIMED_OUT:
        return TxnTimedOut(text)
    return DeliveryError(text)


TXN_RETRY_BACKOFF_MS = 20
"""A transaction begun right after a commit is refused (CONCURRENT_TRANSACTIONS) until the broker
has written the last one's markers, and librdkafka retries after ``retry.backoff.ms``: at its default
of 100 ms a back-to-back transaction often took 100 ms more. 20 ms is the Java client's backoff for
that error (KAFKA-5477)."""


class TransactionalProducer(Producer):
    """Produce, send consumer offsets and commit as one Kafka transaction."""

    def __init__(self, settings: KafkaSettings, transactional_id: str,
                 config: Mapping[str, Any] | None = None, timeout_s: float = 30.0,
                 retry_backoff_ms: int = TXN_RETRY_BACKOFF_MS) -> None:
        """Initialise transactions for ``transactional_id`` (fencing an earlier producer with it).

        ``retry_backoff_ms`` is the wait before a request is retried (see :data:`TXN_RETRY_BACKOFF_MS`);
        repeated retries back off exponentially up to ten times it, librdkafka's own ratio.
        """
        backoff = {"retry.backoff.ms": retry_backoff_ms, "retry.backoff.max.ms": min(10 * retry_backoff_ms, 60_000)}
        merged = {"transactional.id": transactional_id, "transaction.timeout.ms": 60000, **backoff,
                  **dict(config or {})}
        merged.pop("enable.idempotence", None)
        super().__init__(settings, merged)
        self.timeout_s = timeout_s
        self._call(self._client.init_transactions, "init_transactions")

    def _call(self, fn: Callable[..., Any], action: str, *args: Any, attempts: int = 3) -> None:
        for attempt in range(1, attempts + 1):
            try:
                fn(*args, self.timeout_s) if args or action != "begin_transaction" else fn()
                return
            except KafkaException as exc:
                error = _classify(exc, action)
                if isinstance(error, TxnTimedOut) and attempt < attempts:
                    log.warning("%s: retrying (%d/%d)", error, attempt, attempts)
                    continue
                raise error from exc

    def begin(self) -> None:
        """Start a transaction."""
        try:
            self._client.begin_transaction()
        except KafkaException as exc:
            raise _classify(exc, "begin_transaction") from exc

    def produce_many(
        self,
        topic: str,
        values: Iterable[bytes | None],
        keys: Iterable[bytes | None],
        headers: Headers | None = None,
        partitions: Iterable[int] | None = None,
    ) -> None:
        """Enqueue records in the open transaction: ``values``, ``keys``, ``partitions`` in step, all with ``headers``.

        Without ``partitions`` each record goes where its key hashes to. No per-record delivery
        callback: the transaction's commit confirms them. librdkafka's ``commit_transaction`` first
        waits for every record of the transaction to be delivered, and if any of them failed it does
        not commit and raises an abortable error (``TxnAbortable`` here), so nothing of the
        transaction, consumer offsets included, becomes visible unless all of it was delivered:
        still never fire-and-forget, without a Python call and a message object per record (about a
        third of the produce path's cost). Only valid between :meth:`begin` and :meth:`commit`. A
        record librdkafka refuses outright raises ``DeliveryError`` as in :meth:`produce`.
        """
        produce = self._client.produce
        rows = zip(values, keys, repeat(ANY_PARTITION) if partitions is None else partitions)  # noqa: B905
        for value, key, partition in rows:
            try:
                produce(topic, value, key, partition, headers=headers)  # type: ignore[arg-type]
            except BufferError:
                self._produce_when_room(topic, value, key, partition, headers)
            except KafkaException as exc:
                msg = f"cannot produce to {topic}: {exc.args[0]}"
                raise DeliveryError(msg) from exc

    def _produce_when_room(
        self, topic: str, value: bytes | None, key: bytes | None, partition: int, headers: Headers | None
    ) -> None:
        while True:
            self._client.poll(0.05)
            try:
                self._client.produce(topic, value, key, partition, headers=headers)  # type: ignore[arg-type]
                return
            except BufferError:
                continue
            except KafkaException as exc:
                msg = f"cannot produce to {topic}: {exc.args[0]}"
                raise DeliveryError(msg) from exc

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: Any) -> None:
        """Add the consumer's next offsets to the open transaction."""
        self._call(self._client.send_offsets_to_transaction, "send_offsets", offsets, group_metadata)

    def commit(self) -> None:
        """Commit (flushes first); a failed delivery surfaces as an abortable error."""
        self._call(self._client.commit_transaction, "commit_transaction")
        self.raise_for_error()

    def abort(self) -> None:
        """Abort the open transaction.

        In-flight produce requests are drained first: purging them and sending EndTxn right away makes
        Kafka 4 brokers answer INVALID_TXN_STATE (fatal), so we let them land, then abort.
        """
        self._client.flush(self.timeout_s)
        self._call(self._client.abort_transaction, "abort_transaction")
        self._error = None


# ------------------------------------------------------------------------------------------ consumer


FETCH_QUEUE_BACKOFF_MS = 10
"""Once a consumer's prefetch queue holds ``queued.max.messages.kbytes`` (64 MiB) or
``queued.min.messages`` per partition, librdkafka stops fetching and postpones the next fetch by
``fetch.queue.backoff.ms``, 1000 ms by default. A loop that takes a batch and then works on it
drains that queue in a fraction of a second and then waits in ``consume`` for the rest of the second:
one consumer of two partitions of 1 KB records read 87 k records/s at the default and 263 to 319 k/s
at 10 ms (``python -m bench.fetch_backoff``, bench/results/fetch-backoff-vm.json)."""


class Consumer:
    """A consumer group member for the transactional loop: no auto commit, read_committed."""

    def __init__(
        self,
        settings: KafkaSettings,
        group_id: str,
        topics: Sequence[str],
        config: Mapping[str, Any] | None = None,
        on_revoke: Callable[[list[TopicPartition]], None] | None = None,
        on_assign: Callable[[list[TopicPartition]], None] | None = None,
        fetch_backoff_ms: int = FETCH_QUEUE_BACKOFF_MS,
    ) -> None:
        """Subscribe to ``topics``.

        ``fetch_backoff_ms`` is the pause after a full prefetch queue (see :data:`FETCH_QUEUE_BACKOFF_MS`).
        """
        base = {
            "fetch.queue.backoff.ms": fetch_backoff_ms,
            "group.id": group_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
        }
        self._client = confluent_kafka.Consumer({**settings.client_config(), **base, **dict(config or {})})
        kwargs: dict[str, Any] = {}
        if on_revoke is not None:
            kwargs["on_revoke"] = lambda _c, parts: on_revoke(parts)
            kwargs["on_lost"] = lambda _c, parts: on_revoke(parts)
        if on_assign is not None:
            kwargs["on_assign"] = lambda _c, parts: on_assign(parts)
        self._client.subscribe(list(topics), **kwargs)
        # The one topic every record comes from, when there is one (a name, not a pattern).
        self._topic = topics[0] if len(topics) == 1 and not topics[0].startswith("^") else None

    def consume(self, max_records: int, timeout_s: float) -> list[Message]:
        """Up to ``max_records`` records; raises ``SourceError`` on a non-EOF error."""
        out = []
        for msg in self._client.consume(max_records, timeout_s):
            error = msg.error()
            if error is None:
                out.append(_to_message(msg))
            elif error.code() != KafkaError._PARTITION_EOF:
                if error.fatal() or error.code() == KafkaError._FATAL:
                    raise SourceError(str(error))
                log.warning("consume: %s", error)
        return out

    def consume_records(self, max_records: int, timeout_s: float) -> Records:
        """Like :meth:`consume`, as columns (see :class:`Records`): the batch path's cheaper form."""
        got = self._client.consume(max_records, timeout_s)
        if list(map(_KafkaMessage.error, got)).count(None) != len(got):
            got = [msg for msg in got if self._usable(msg)]
        return Records.of(got, self._topic)

    @staticmethod
    def _usable(msg: Any) -> bool:
        """True for a record; False for a partition EOF or a passing error; raise on a fatal one."""
        error = msg.error()
        if error is None:
            return True
        if error.code() != KafkaError._PARTITION_EOF:
            if error.fatal() or error.code() == KafkaError._FATAL:
                raise SourceError(str(error))
            log.warning("consume: %s", error)
        return False

    def partition_count(self, topic: str, timeout_s: float = 10.0) -> int | None:
        """How many partitions ``topic`` has, from the cluster's metadata; None where it does not exist."""
        try:
            found = self._client.list_topics(topic, timeout=timeout_s).topics.get(topic)
        except KafkaException as exc:
            msg = f"cannot read the metadata of {topic}: {exc}"
            raise SourceError(msg) from exc
        if found is None or found.error is not None:
            return None
        return len(found.partitions)

    def positions(self) -> list[TopicPartition]:
        """Next offsets to read on every assigned partition."""
        return list(self._client.position(self._client.assignment()))

    def group_metadata(self) -> Any:
        """Group metadata for ``send_offsets_to_transaction``."""
        return self._client.consumer_group_metadata()

    def rewind_to_committed(self, timeout_s: float = 30.0) -> None:
        """Seek every assigned partition back to its committed offset (after an abort).

        A cluster that does not answer within ``timeout_s`` is a ``SourceError``; nothing is moved
        then, so the call can simply be made again.
        """
        assigned = self._client.assignment()
        if not assigned:
            return
        try:
            for tp in self._client.committed(assigned, timeout=timeout_s):
                offset = tp.offset if tp.offset >= 0 else confluent_kafka.OFFSET_BEGINNING
                self._client.seek(TopicPartition(tp.topic, tp.partition, offset))
        except KafkaException as exc:
            msg = f"cannot rewind {len(assigned)} partitions to their committed offsets: {exc.args[0].str()}"
            raise SourceError(msg) from exc

    def assignment(self) -> list[TopicPartition]:
        """Currently assigned partitions."""
        return list(self._client.assignment())

    def lag(self, topics: Sequence[str] | None = None, *, cached: bool = False) -> dict[tuple[str, int], int]:
        """Records left to read per partition (high watermark - position).

        Without ``topics``: the partitions assigned to this member. With ``topics``: every partition
        of them, so a member can tell that the whole group is done (partitions it does not own count
        from the group's committed offset). Where a position is unknown (nothing consumed yet, or not
        ours), the committed offset, else the low watermark, stands in for it. ``cached`` uses the
        watermarks the last fetches brought instead of asking the broker (a round trip per partition;
        good enough for a metric, not for deciding that the input is finished). A broker that does
        not answer in time is a :class:`SourceError`.
        """
        try:
            return self._lag(topics, cached)
        except KafkaException as exc:
            msg = f"cannot read the lag of {list(topics) if topics else 'the assigned partitions'}: {exc}"
            raise SourceError(msg) from exc

    def _lag(self, topics: Sequence[str] | None, cached: bool) -> dict[tuple[str, int], int]:
        assigned = self._client.assignment()
        if topics is not None:
            owned = {(tp.topic, tp.partition) for tp in assigned}
            everything = [TopicPartition(t, p) for t in topics for p in self._client.list_topics(t, timeout=10)
                          .topics[t].partitions]
            assigned = assigned + [tp for tp in everything if (tp.topic, tp.partition) not in owned]
        if not assigned:
            return {}
        positions = self._client.position(assigned)
        unknown = [tp for tp in positions if tp.offset < 0]
        committed = {(tp.topic, tp.partition): tp.offset for tp in self._client.committed(unknown, timeout=10)} \
            if unknown else {}
        out = {}
        for tp in positions:
            low, high = self._client.get_watermark_offsets(tp, timeout=5, cached=cached)
            if high < 0:  # nothing cached for this partition yet
                continue
            where = tp.offset if tp.offset >= 0 else committed.get((tp.topic, tp.partition), -1)
            out[(tp.topic, tp.partition)] = max(0, high - (where if where >= 0 else low))
        return out

    def close(self) -> None:
        """Leave the group."""
        self._client.close()


def offsets(items: Iterable[tuple[str, int, int]]) -> list[TopicPartition]:
    """``TopicPartition`` list from (topic, partition, next offset) triples."""
    return [TopicPartition(t, p, o) for t, p, o in items]


# ------------------------------------------------------------------------------------ riding out outages


class CallThread:
    """Runs blocking client calls one at a time on a daemon thread, so that a caller can stop waiting for one.

    librdkafka's transactional calls can block far past their timeout: ``send_offsets_to_transaction``
    does not check its timeout while the group coordinator is down (confluentinc/librdkafka#5456), and
    after a broker restart it can wait for good on the coordinator's old, decommissioned broker handle
    (#5511): the call returns neither when the broker is back nor when its timeout passes. A caller
    that gives up on such a call (:meth:`abandon`) gets a fresh thread for its next calls and must
    replace the client the call blocks in (a new transactional producer fences the old one). The
    stuck thread is a daemon, so it never keeps the process from exiting; it ends if its call ever
    returns. One call at a time: a call queued behind a stuck one would be stuck with it.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.abandoned = 0
        """How many calls were given up on (each one's thread may still be blocked)."""
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._start()

    def _start(self) -> None:
        self._queue = queue.SimpleQueue()
        thread = threading.Thread(target=self._serve, args=(self._queue,), name=f"{self.name}_{self.abandoned}",
                                  daemon=True)  # fmt: skip
        thread.start()

    @staticmethod
    def _serve(calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None]) -> None:
        while (item := calls.get()) is not None:
            fn, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller through the future
                future.set_exception(exc)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` on the thread; its result or exception comes through the returned future."""
        future: Future[T] = Future()
        self._queue.put((fn, future))
        return future

    def abandon(self) -> None:
        """Leave the thread to the call it is blocked in; later calls run on a new thread."""
        self._queue.put(None)  # the old thread ends once its call returns, if it ever does
        self.abandoned += 1
        self._start()

    def shutdown(self) -> None:
        """Let the thread end after the calls already submitted (without waiting for them)."""
        self._queue.put(None)


class Reachability(Protocol):
    """What a service needs to know of the cluster's state (a :class:`ClusterWatch`)."""

    down_since: float | None
    last_down_at: float

    def answering_for(self, now: float) -> float:
        """Seconds Kafka has been answering since the latest outage (0 while it does not)."""
        ...


class AlwaysAnswering:
    """Stands in where no cluster watch runs (tests, tools): Kafka counts as answering all along."""

    down_since: float | None = None
    last_down_at = float("-inf")

    def answering_for(self, now: float) -> float:
        """Forever."""
        del now
        return float("inf")


class ClusterWatch:
    """Whether the cluster answers, asked every ``every_s`` by a metadata request on a daemon thread.

    A long-running service uses it to tell an outage from a hang: a call that blocks while the
    cluster does not answer is waited for, one that still blocks once it answers again is not. The
    times are ``time.monotonic()`` seconds. A probe asks only for ``topic`` (when given), so it
    stays cheap on a cluster with many topics. Its client retries a lost connection at least once
    a second (librdkafka's backoff grows to 10 s), so a return is seen within about a second, and
    its own log lines go to DEBUG: the service's clients report the same failures.
    """

    def __init__(self, settings: KafkaSettings, topic: str | None = None, every_s: float = 1.0,
                 timeout_s: float = 3.0) -> None:  # fmt: skip
        self._settings = settings
        self._topic = topic
        self.every_s = every_s
        self.timeout_s = timeout_s
        self.down_since: float | None = None
        """When the current outage began (the start of the first probe that got no answer); None while it answers."""
        self.last_down_at = float("-inf")
        """The start of the latest probe that got no answer."""
        self.up_since = float("-inf")
        """The end of the first probe that got an answer after the latest outage."""
        self._stop = threading.Event()
        self._client: AdminClient | None = None

    def start(self) -> ClusterWatch:
        """Start probing; returns self."""
        threading.Thread(target=self._run, name="kafka-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop probing (the probe in progress ends within its timeout)."""
        self._stop.set()

    def answering_for(self, now: float) -> float:
        """Seconds the cluster has been answering since the latest outage (0 while it does not)."""
        return 0.0 if self.down_since is not None else max(0.0, now - self.up_since)

    def probe(self) -> bool:
        """Ask once now; True when the cluster answered within ``timeout_s``."""
        if self._client is None:  # its failures are what it reports: its own lines go to DEBUG
            config: dict[str, Any] = {"reconnect.backoff.max.ms": 1000, **self._settings.client_config(),
                                      "logger": DemotedLog(rdkafka_log)}  # fmt: skip
            self._client = AdminClient(config)
        try:
            self._client.list_topics(self._topic, timeout=self.timeout_s)
        except KafkaException:
            return False
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            asked = time.monotonic()
            if not self.probe():
                self.last_down_at = asked
                if self.down_since is None:
                    self.down_since = asked
            elif self.down_since is not None:
                self.up_since, self.down_since = time.monotonic(), None
