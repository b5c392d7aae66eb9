"""A consumer-group member that reads records into packed columns, with no Python object per record.

Reading a record through confluent-kafka costs a ``Message`` object, an object per field and, with
the connector's seven headers, a list of seven tuples: on the worker's path that is more CPU than
librdkafka's own work (``python -m bench.kafka_client_cost``). :class:`PackedReader` is the same
kind of member as :class:`llmpipe.kafka_io.Consumer` (no auto commit, ``read_committed``,
cooperative rebalancing, the same callbacks and questions), but librdkafka is driven by the native
core (``llmpipe_native.KafkaReader``, the Rust ``rdkafka`` crate) and a consume call returns
:class:`PackedColumns`: the layout that the native core and the device lane read
(``gpu_stage.transform.packed``). Its group metadata is what a confluent-kafka transactional producer
takes, so offsets still commit inside the producer's transaction, fenced by the member's epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import llmpipe_native
import numpy as np
import numpy.typing as npt
from confluent_kafka import TopicPartition

from llmpipe.errors import ConfigError, SourceError
from llmpipe.kafka_io.config import KafkaSettings, native_config
from llmpipe.kafka_io.consumer import FETCH_QUEUE_BACKOFF_MS, member_config
from llmpipe.kafka_io.logs import log_queued
from llmpipe.packed import COLUMN_KINDS, joined, last_end

OFFSET_INVALID = -1001
"""librdkafka's offset for "none known" (no position yet, nothing committed)."""

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class PackedColumns:
    """Consumed records as ten columns, in consumption order (offsets ascend within a partition).

    Values, keys and headers lie back to back with their ends; a record's headers are encoded as
    ``gpu_stage.transform.packed`` describes.
    """

    value_buf: U8
    value_ends: I64
    key_buf: U8
    key_ends: I64
    key_null: U8
    header_buf: U8
    header_ends: I64
    partitions: I64
    offsets: I64
    timestamps_ms: I64

    def __len__(self) -> int:
        """Number of records."""
        return len(self.value_ends)

    def columns(self) -> tuple[npt.NDArray[np.generic], ...]:
        """The ten columns in the order the native core takes them."""
        return tuple(getattr(self, f.name) for f in fields(self))  # not astuple: it deep-copies

    @property
    def nbytes(self) -> int:
        """Sum of the value sizes."""
        return last_end(self.value_ends)


def _columns(raw: Sequence[bytes]) -> PackedColumns:
    return PackedColumns(*(np.frombuffer(b, dtype=kind) for b, kind in zip(raw, COLUMN_KINDS, strict=True)))


def _concatenated(parts: Sequence[PackedColumns]) -> PackedColumns:
    """One set of columns holding ``parts``' records in order (each end rebased onto the joined buffer)."""
    if len(parts) == 1:
        return parts[0]
    return PackedColumns(*joined([part.columns() for part in parts]))  # type: ignore[arg-type]


def _rows(columns: PackedColumns, rows: I64) -> PackedColumns:
    """The records at ``rows`` (ascending), as columns of their own (a rebalance's path, not the batch's)."""
    def pick(buf: U8, ends: I64) -> tuple[U8, I64]:
        starts = np.concatenate([[0], ends[:-1]])
        pieces = [buf[starts[i] : ends[i]] for i in rows]
        return (np.concatenate(pieces) if pieces else buf[:0]), np.cumsum([len(x) for x in pieces], dtype=np.int64)

    value_buf, value_ends = pick(columns.value_buf, columns.value_ends)
    key_buf, key_ends = pick(columns.key_buf, columns.key_ends)
    header_buf, header_ends = pick(columns.header_buf, columns.header_ends)
    return PackedColumns(value_buf, value_ends, key_buf, key_ends, columns.key_null[rows], header_buf,
                         header_ends, columns.partitions[rows], columns.offsets[rows],
                         columns.timestamps_ms[rows])  # fmt: skip


@dataclass
class PackedRecords:
    """Consumed records of one topic as packed columns, from one consume call or several joined.

    The collect loop's buffer when the worker reads with :class:`PackedReader`: the same questions as
    :class:`llmpipe.kafka_io.Records` (length, value bytes, partitions seen, the records of some
    partitions dropped, the offsets to commit), answered from the columns.
    """

    topic: str = ""
    parts: list[PackedColumns] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(map(len, self.parts))

    @property
    def nbytes(self) -> int:
        """Sum of the value sizes."""
        return sum(c.nbytes for c in self.parts)

    def extend(self, other: PackedRecords) -> None:
        """Append ``other``'s records."""
        self.topic = self.topic or other.topic
        self.parts += other.parts

    def columns(self) -> PackedColumns:
        """Every record as one set of columns, in consumption order."""
        if not self.parts:
            return _columns([b""] * 10)
        return _concatenated(self.parts)

    def partitions_seen(self) -> set[tuple[str, int]]:
        """Every (topic, partition) with a record here."""
        return {(self.topic, int(p)) for c in self.parts for p in np.unique(c.partitions)}

    def without(self, dropped: set[tuple[str, int]]) -> PackedRecords:
        """The records whose (topic, partition) is not in ``dropped`` (rebalances: not on the hot path)."""
        gone = [p for t, p in dropped if t == self.topic]
        kept = [_rows(c, np.flatnonzero(~np.isin(c.partitions, gone))) for c in self.parts]
        kept = [c for c in kept if len(c)]
        return PackedRecords(self.topic, kept)

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Per (topic, partition), the offset after its last record here."""
        last: dict[tuple[str, int], int] = {}
        for c in self.parts:
            last.update(((self.topic, int(p)), int(o) + 1) for p, o in zip(c.partitions, c.offsets, strict=True))
        return last


class PackedReader:
    """A consumer group member for the transactional loop whose records come as packed columns."""

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
        """Subscribe to ``topics``, with the settings of :class:`llmpipe.kafka_io.Consumer`."""
        if len(topics) != 1 or topics[0].startswith("^"):
            msg = f"a packed reader reads one topic, named, not {list(topics)}"
            raise ConfigError(msg)
        self._topic = topics[0]
        strings = native_config(member_config(settings, group_id, fetch_backoff_ms, config))
        self._callbacks = {"assign": on_assign, "revoke": on_revoke}
        try:
            self._reader = llmpipe_native.KafkaReader(strings, list(topics), self._on_rebalance)
        except (ValueError, RuntimeError) as exc:
            msg = f"cannot make a Kafka consumer for {list(topics)}: {exc}"
            raise SourceError(msg) from exc

    def _on_rebalance(self, kind: str, parts: list[tuple[str, int]]) -> None:
        callback = self._callbacks.get(kind)
        if callback is not None:
            callback([TopicPartition(topic, partition) for topic, partition in parts])

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()``, its error a :class:`SourceError`; librdkafka's queued lines logged after it."""
        try:
            return call()
        except RuntimeError as exc:
            msg = f"{what}: {exc}"
            raise SourceError(msg) from exc
        finally:
            log_queued(self._reader.take_logs)


    def consume_packed(self, max_records: int, timeout_s: float, max_bytes: int = 1 << 30) -> PackedColumns | None:
        """Up to ``max_records`` records (or ``max_bytes`` of values); None when none came in ``timeout_s``.

        A fatal consumer error is a :class:`SourceError`; any other is logged and the call goes on.
        """
        raw = self._call("consume", lambda: self._reader.consume(max_records, max_bytes, timeout_s))
        return None if raw is None else _columns(raw)

    def consume_records(self, max_records: int, timeout_s: float, max_bytes: int = 1 << 30) -> PackedRecords:
        """Like :meth:`consume_packed`, as :class:`PackedRecords` (empty when none came): the collect loop's form."""
        columns = self.consume_packed(max_records, timeout_s, max_bytes)
        if columns is None:
            return PackedRecords(self._topic)
        return PackedRecords(self._topic, [columns])

    def partition_count(self, topic: str, timeout_s: float = 10.0) -> int | None:
        """How many partitions ``topic`` has, from the cluster's metadata; None where it does not exist."""
        found: int | None = self._call(f"cannot read the metadata of {topic}",
                                       lambda: self._reader.partition_count(topic, timeout_s))  # fmt: skip
        return found

    def positions(self) -> list[TopicPartition]:
        """Next offsets to read on every assigned partition."""
        return [TopicPartition(t, p, o) for t, p, o in self._call("position", self._reader.positions)]

    def group_metadata(self) -> bytes:
        """Group metadata for ``send_offsets_to_transaction`` (librdkafka's serialized form)."""
        found: bytes = self._call("group metadata", self._reader.group_metadata)
        return found

    def assignment(self) -> list[TopicPartition]:
        """Currently assigned partitions."""
        return [TopicPartition(t, p) for t, p in self._call("assignment", self._reader.assignment)]

    def rewind_to_committed(self, timeout_s: float = 30.0) -> None:
        """Seek every assigned partition back to its committed offset (after an abort).

        A cluster that does not answer within ``timeout_s`` is a ``SourceError``; nothing is moved
        then, so the call can simply be made again.
        """
        assigned = self._call("assignment", self._reader.assignment)
        if not assigned:
            return
        what = f"cannot rewind {len(assigned)} partitions to their committed offsets"
        committed = self._call(what, lambda: self._reader.committed(assigned, timeout_s))
        targets = [(t, p, o if o >= 0 else -2) for t, p, o in committed]
        self._call(what, lambda: self._reader.seek(targets, timeout_s))

    def lag(self, topics: Sequence[str] | None = None, *, cached: bool = False) -> dict[tuple[str, int], int]:
        """Records left to read per partition, as :meth:`llmpipe.kafka_io.Consumer.lag` counts them."""
        return dict(self._call(f"cannot read the lag of {list(topics) if topics else 'the assigned partitions'}",
                               lambda: self._lag(topics, cached)))  # fmt: skip

    def _lag(self, topics: Sequence[str] | None, cached: bool) -> dict[tuple[str, int], int]:
        reader = self._reader
        where = {(t, p): o for t, p, o in reader.positions()}
        if topics is not None:
            for topic in topics:
                for p in range(reader.partition_count(topic, 10.0) or 0):
                    where.setdefault((topic, p), OFFSET_INVALID)
        unknown = [tp for tp, o in where.items() if o < 0]
        if unknown:
            where.update({(t, p): o for t, p, o in reader.committed(unknown, 10.0)})
        out = {}
        for (topic, partition), at in where.items():
            low, high = reader.watermarks(topic, partition, 5.0, cached)
            if high < 0:  # nothing cached for this partition yet
                continue
            out[(topic, partition)] = max(0, high - (at if at >= 0 else low))
        return out

    def close(self) -> None:
        """Leave the group (what this member owns is revoked through ``on_revoke`` first)."""
        self._call("close", lambda: self._reader.close())
