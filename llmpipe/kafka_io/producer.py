"""Producers whose every record is confirmed: plain (delivery callbacks) and transactional.

Produce is never fire-and-forget: a record sent with ``produce`` has a delivery callback, the first
failure is kept, and ``flush``/``commit`` raise it as a ``DeliveryError``; records sent inside a
transaction with ``TransactionalProducer.produce_many`` are confirmed by the transaction's commit
instead (see there). Transaction errors are classified the way librdkafka documents them: retriable →
call again, abortable → abort and rewind, fatal (fenced) → stop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import repeat
from typing import Any, TypeVar

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from llmpipe.errors import DeliveryError, FencedError
from llmpipe.kafka_io.config import KafkaSettings
from llmpipe.kafka_io.logs import log
from llmpipe.kafka_io.records import Headers

T = TypeVar("T")
_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
ANY_PARTITION = -1
"""No partition chosen: librdkafka's partitioner picks one from the key."""


def producer_config(settings: KafkaSettings, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The librdkafka configuration of a producer: idempotent, the settings' compression, then ``config``."""
    base = {"enable.idempotence": True, "linger.ms": 20, "compression.type": settings.compression}
    return {**settings.client_config(), **base, **dict(config or {})}


def transactional_config(
    transactional_id: str, config: Mapping[str, Any] | None, retry_backoff_ms: int
) -> dict[str, Any]:
    """What a transactional producer adds to :func:`producer_config`'s ``config``.

    ``retry_backoff_ms`` is the wait before a request is retried (see :data:`TXN_RETRY_BACKOFF_MS`);
    repeated retries back off exponentially up to ten times it, librdkafka's own ratio.
    """
    backoff = {"retry.backoff.ms": retry_backoff_ms, "retry.backoff.max.ms": min(10 * retry_backoff_ms, 60_000)}
    merged = {"transactional.id": transactional_id, "transaction.timeout.ms": 60000, **backoff, **dict(config or {})}
    merged.pop("enable.idempotence", None)
    return merged


class Producer:
    """A producer whose deliveries are all confirmed: ``flush`` raises the first failure."""

    def __init__(self, settings: KafkaSettings, config: Mapping[str, Any] | None = None) -> None:
        self._config = producer_config(settings, config)
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
    return classified(f"{action} failed: {err}", fatal=err.fatal() or err.code() == KafkaError._FENCED,
                      abortable=err.txn_requires_abort(),
                      retriable=err.retriable() or err.code() == KafkaError._TIMED_OUT)  # fmt: skip


def retrying(call: Callable[[], T], attempts: int, errors: type[Exception],
             classify: Callable[[Exception], DeliveryError]) -> T:  # fmt: skip
    """``call()``, made again while it fails with a timed-out error, up to ``attempts`` calls in all.

    A failure of type ``errors`` is raised as ``classify`` makes it (chained from the cause); the
    last timeout too.
    """
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except errors as exc:
            error = classify(exc)
            if isinstance(error, TxnTimedOut) and attempt < attempts:
                log.warning("%s: retrying (%d/%d)", error, attempt, attempts)
                continue
            raise error from exc
    msg = f"attempts must be at least 1, not {attempts}"
    raise ValueError(msg)


def classified(text: str, *, fatal: bool, abortable: bool, retriable: bool) -> DeliveryError:
    """The error for a failed transactional call, by librdkafka's classification of it.

    Fatal (fenced included) → :class:`FencedError`: stop. Abortable → :class:`TxnAbortable`: abort and
    rewind. Retriable (a timeout included) → :class:`TxnTimedOut`: outcome unknown, call again or
    replace the producer. Anything else is a plain :class:`DeliveryError`.
    """
    if fatal:
        return FencedError(text)
    if abortable:
        return TxnAbortable(text)
    if retriable:
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

        See :func:`transactional_config` for ``retry_backoff_ms``.
        """
        super().__init__(settings, transactional_config(transactional_id, config, retry_backoff_ms))
        self.timeout_s = timeout_s
        self._call(self._client.init_transactions, "init_transactions")

    def _call(self, fn: Callable[..., Any], action: str, *args: Any, attempts: int = 3) -> None:
        def call() -> None:
            fn(*args, self.timeout_s) if args or action != "begin_transaction" else fn()

        retrying(call, attempts, KafkaException, lambda exc: _classify(exc, action))  # type: ignore[arg-type]

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
