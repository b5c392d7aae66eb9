"""A transactional producer that writes a chunk's typed rows from its buffers, with no Python object per row.

Producing a typed row through confluent-kafka costs a ``bytes`` object for its value, one for its
key and a ``produce`` call that converts its header list: on the GPU host that was the largest part
of the worker's main thread (``bench.e2e_worker --compare-kafka-writer``). :class:`PackedWriter` is
the same kind of producer as :class:`llmpipe.kafka_io.TransactionalProducer` (idempotent,
transactional, the same configuration, errors classified the same way, never fire-and-forget), but
librdkafka is driven by the native core (``llmpipe_native.KafkaWriter``, the Rust ``rdkafka``
crate), and :meth:`PackedWriter.produce_rows` enqueues a whole chunk in one call, the GIL released:
each value a slice of the transform's output buffer (behind the wire prefix, if any), each key a
slice of the raw batch's packed key column. As with ``produce_many``, no row has a delivery
callback of its own: the transaction's commit waits for every record and fails, abortably, if one
was not delivered, so nothing of the transaction (offsets included) is visible unless all of it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from typing import Any

import llmpipe_native
import numpy as np
import numpy.typing as npt

from llmpipe.errors import DeliveryError
from llmpipe.kafka_io.config import KafkaSettings, native_config
from llmpipe.kafka_io.logs import log_queued
from llmpipe.kafka_io.producer import (
    ANY_PARTITION,
    TXN_RETRY_BACKOFF_MS,
    classified,
    producer_config,
    retrying,
    transactional_config,
)
from llmpipe.kafka_io.records import Headers

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
FENCED = "Fenced"
TIMED_OUT = "OperationTimedOut"
"""The librdkafka codes (as the native core names them) that :func:`_error` classifies beyond its flags,
as :mod:`llmpipe.kafka_io.producer` does for confluent-kafka's errors."""

PackedKeys = tuple[U8, I64, U8, I64]
"""``(key_buf, key_ends, key_null, rows)``: a raw batch's packed key column, read at row positions."""


def _error(exc: Exception) -> DeliveryError:
    """Our error for a failed native call (``llmpipe_native.KafkaCallError``), classified by librdkafka."""
    text, code, fatal, retriable, abortable = exc.args
    fatal, retriable = fatal or code == FENCED, retriable or code == TIMED_OUT
    return classified(text, fatal=fatal, abortable=abortable, retriable=retriable)


class PackedWriter:
    """Produce, send consumer offsets and commit as one Kafka transaction, rows written from buffers."""

    def __init__(self, settings: KafkaSettings, transactional_id: str,
                 config: Mapping[str, Any] | None = None, timeout_s: float = 30.0,
                 retry_backoff_ms: int = TXN_RETRY_BACKOFF_MS) -> None:
        """Initialise transactions for ``transactional_id`` (fencing an earlier producer with it).

        The configuration is :class:`~llmpipe.kafka_io.TransactionalProducer`'s.
        """
        merged = producer_config(settings, transactional_config(transactional_id, config, retry_backoff_ms))
        self.timeout_s = timeout_s
        try:
            self._writer = llmpipe_native.KafkaWriter(native_config(merged))
        except ValueError as exc:
            msg = f"cannot make a Kafka producer: {exc}"
            raise DeliveryError(msg) from exc
        self._call(lambda: self._writer.init_transactions(self.timeout_s))

    def _call(self, call: Callable[[], Any], attempts: int = 3) -> Any:
        """``call()``, retried while it times out, as ``TransactionalProducer``'s calls are.

        Its error is classified (the native error's text names the call); librdkafka's lines are logged
        after each try.
        """

        def logged() -> Any:
            try:
                return call()
            finally:
                log_queued(self._writer.take_logs)

        return retrying(logged, attempts, llmpipe_native.KafkaCallError, _error)

    def begin(self) -> None:
        """Start a transaction."""
        self._call(self._writer.begin, attempts=1)

    def produce_rows(
        self,
        topic: str,
        values: object,
        offsets: I64,
        keys: PackedKeys | Sequence[bytes | None] | None,
        headers: Headers | None = None,
        partitions: I64 | None = None,
        prefix: bytes = b"",
    ) -> int:
        """Enqueue row ``i`` = ``prefix`` + ``values[offsets[i]:offsets[i + 1]]`` in the open transaction.

        ``values`` is any contiguous byte buffer; ``keys`` the rows' keys (:data:`PackedKeys`, a list,
        or None for none); ``partitions`` each row's partition (``ANY_PARTITION``, or no array:
        where the key hashes to); every row carries ``headers``. Waits while librdkafka's queue is
        full (up to the producer's timeout). Only valid between :meth:`begin` and :meth:`commit`;
        confirmed by the commit (see the module docstring). Returns the rows enqueued.
        """
        listed = keys if keys is None or isinstance(keys, tuple) else list(keys)
        sent: int = self._call(lambda: self._writer.produce_rows(
            topic, values, offsets, prefix, listed, partitions, list(headers or []), self.timeout_s), attempts=1)
        return sent

    def produce_many(
        self,
        topic: str,
        values: Iterable[bytes | None],
        keys: Iterable[bytes | None],
        headers: Headers | None = None,
        partitions: Iterable[int] | None = None,
    ) -> None:
        """``TransactionalProducer.produce_many``'s form: records as objects (a null value as empty)."""
        items = [value or b"" for value in values]
        ends = np.cumsum([0, *map(len, items)], dtype=np.int64)
        where = None if partitions is None else np.fromiter(partitions, dtype=np.int64, count=len(items))
        self.produce_rows(topic, b"".join(items), ends, list(islice(keys, len(items))), headers, where)

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
        partition: int = ANY_PARTITION,
    ) -> None:
        """Enqueue one record in the open transaction (confirmed by the commit)."""
        self._call(lambda: self._writer.produce(
            topic, value, key, partition, list(headers or []), self.timeout_s), attempts=1)

    def send_offsets(self, offsets: Sequence[Any], group_metadata: bytes) -> None:
        """Add the consumer's next offsets (``TopicPartition``-like) to the open transaction."""
        triples = [(tp.topic, tp.partition, tp.offset) for tp in offsets]
        self._call(lambda: self._writer.send_offsets(triples, group_metadata, self.timeout_s))

    def commit(self) -> None:
        """Commit (every record delivered first); a failed delivery surfaces as an abortable error."""
        self._call(lambda: self._writer.commit(self.timeout_s))
        self.raise_for_error()

    def abort(self) -> None:
        """Abort the open transaction, once what is in flight has landed (see ``TransactionalProducer.abort``)."""
        self._call(lambda: self._writer.flush(self.timeout_s), attempts=1)
        self._call(lambda: self._writer.abort(self.timeout_s))
        self._writer.take_failure()

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait for every enqueued record; raise ``DeliveryError`` if any failed or is still queued."""
        remaining: int = self._call(lambda: self._writer.flush(timeout_s), attempts=1)
        self.raise_for_error()
        if remaining:
            msg = f"{remaining} records still undelivered after {timeout_s}s"
            raise DeliveryError(msg)

    def poll(self, timeout: float = 0.0) -> None:
        """Serve delivery reports."""
        self._call(lambda: self._writer.poll(timeout), attempts=1)

    def raise_for_error(self) -> None:
        """Raise the first delivery failure seen, once."""
        failure = self._writer.take_failure()
        if failure is not None:
            msg = f"delivery failed: {failure}"
            raise DeliveryError(msg)

    @property
    def delivered(self) -> int:
        """Records delivered so far."""
        return int(self._writer.counts()[0])

    def __len__(self) -> int:
        return int(self._writer.in_flight())
