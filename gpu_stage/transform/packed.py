"""A batch as contiguous buffers, the way a Kafka fetch delivers it: no Python object per record.

The values lie back to back in one buffer with their ends, the keys likewise (with a null flag
each), and each record's headers are encoded back to back (per header: name length ``u32`` LE, the
name, value length ``i32`` LE with -1 for a null value, the value). The native core and the device
lane read a record as slices of these buffers; Python objects for a record are made only where one
is needed: a dead letter's raw bytes and headers when it is read (:class:`DeadLetters`), or a key to
produce with.

:class:`PackedBatch` reads like a :class:`~gpu_stage.transform.batch.RawBatch` (``values[i]``, ``keys[i]``,
``headers[i]``, ``partitions[i]`` …), each item made on access, so code that looks at a few records
of a batch (a result's keys, a test) takes either.
"""

from __future__ import annotations

import functools
import heapq
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast, overload

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.batch import RawBatch, chunk_bounds
from llmpipe.dlq import BadRecord, Reason
from llmpipe.packed import COLUMN_KINDS, join_into, joined_nbytes, last_end

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
Headers = list[tuple[str, bytes | None]]
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
T = TypeVar("T")


def _start(ends: I64, i: int) -> int:
    return int(ends[i - 1]) if i > 0 else 0


class _Lazy(Sequence[T]):
    """A read-only sequence whose items are made on access (a slice gives a list)."""

    def __init__(self, n: int) -> None:
        self._n = n

    def __len__(self) -> int:
        return self._n

    def _item(self, i: int) -> T:
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self._item(j) for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._item(i)

    def __iter__(self) -> Iterator[T]:
        return (self._item(i) for i in range(self._n))


class Values(_Lazy[bytes]):
    """Record ``i``'s bytes of one packed column."""

    def __init__(self, buf: U8, ends: I64) -> None:
        super().__init__(len(ends))
        self._buf, self._ends = buf, ends

    def _item(self, i: int) -> bytes:
        return self._buf[_start(self._ends, i) : int(self._ends[i])].tobytes()


class Keys(_Lazy[bytes | None]):
    """Record ``i``'s key: its bytes, or None where ``null[i]`` is set."""

    def __init__(self, buf: U8, ends: I64, null: U8) -> None:
        super().__init__(len(ends))
        self._values, self._null = Values(buf, ends), null

    def _item(self, i: int) -> bytes | None:
        return None if self._null[i] else self._values[i]


class HeaderLists(_Lazy[Headers]):
    """Record ``i``'s headers, decoded from the packed header buffer by the native core."""

    def __init__(self, buf: U8, ends: I64) -> None:
        super().__init__(len(ends))
        import llmpipe_native

        self._decode = functools.partial(llmpipe_native.headers_at, buf, ends)

    def _item(self, i: int) -> Headers:
        return self._decode(i)


class Picked(_Lazy[bytes | None]):
    """``source[rows[i]]``: the keys of a batch's good rows without building a list per batch."""

    def __init__(self, source: Sequence[bytes | None], rows: I64) -> None:
        super().__init__(len(rows))
        self._source, self._rows = source, rows

    def _item(self, i: int) -> bytes | None:
        return self._source[int(self._rows[i])]


def encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """One record's headers in the packed encoding."""
    out = bytearray()
    for name, value in headers:
        raw = name.encode()
        out += _U32.pack(len(raw)) + raw
        out += _I32.pack(-1) if value is None else _I32.pack(len(value)) + value
    return bytes(out)


def _packed(items: Sequence[bytes]) -> tuple[U8, I64]:
    ends = np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=len(items)), dtype=np.int64)
    return np.frombuffer(b"".join(items), dtype=np.uint8), ends


def _layout(sizes: Sequence[int], place: Sequence[int]) -> tuple[list[int], int]:
    """Each column's start in one buffer, laid out in the order ``place`` gives, and the buffer's size.

    Each starts at an 8-byte boundary. ``sizes[0]`` (the values) should include a byte to spare: a
    device lane reads at least one byte of them.
    """
    starts = [0] * len(sizes)
    end = 0
    for i in place:
        starts[i] = end
        end += -(-sizes[i] // 8) * 8
    return starts, end


# How ``PackedBatch.of`` lays a batch out in one buffer (positions in its list of columns): the columns
# of one item per record first, then the keys, the values and the headers. Where a column lies then
# depends on the record count alone (the values too, when every key has one length), so a device lane
# that keeps each column's view between batches of one size makes none anew for them: a view and its
# launch parameters cost the thread that feeds the device tens of microseconds each.
_PLACE = (1, 3, 4, 6, 7, 8, 9, 2, 0, 5)


@dataclass(frozen=True)
class PackedBatch:
    """A batch of ``llm.raw`` records as contiguous buffers (see the module docstring)."""

    topic: str
    # Each buffer's bytes end at its last end; it may be longer (a reused input buffer).
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

    @functools.cached_property
    def values(self) -> Values:
        """Record ``i``'s value as ``bytes`` (made on access)."""
        return Values(self.value_buf, self.value_ends)

    @functools.cached_property
    def keys(self) -> Keys:
        """Record ``i``'s key as ``bytes`` or None (made on access)."""
        return Keys(self.key_buf, self.key_ends, self.key_null)

    @functools.cached_property
    def headers(self) -> HeaderLists:
        """Record ``i``'s headers as ``(name, value)`` pairs (made on access)."""
        return HeaderLists(self.header_buf, self.header_ends)

    @property
    def value_bytes(self) -> int:
        """Total size of the values."""
        return last_end(self.value_ends)

    def columns(self) -> tuple[npt.NDArray[np.generic], ...]:
        """The ten columns in the order the native core takes them."""
        return (
            self.value_buf,
            self.value_ends,
            self.key_buf,
            self.key_ends,
            self.key_null,
            self.header_buf,
            self.header_ends,
            self.partitions,
            self.offsets,
            self.timestamps_ms,
        )

    @classmethod
    def of(cls, batch: RawBatch, allocate: Callable[[int], U8] | None = None) -> PackedBatch:
        """Pack a batch of Python objects (tests, benchmarks; a fetch would fill the buffers itself).

        ``allocate(size)`` gives the one buffer every column is written into (at least ``size``
        bytes, e.g. a backend's ``input_buffer``, as a fetch would fill it); by default each column
        is an array of its own.
        """
        value_buf, value_ends = _packed(list(batch.values))
        key_buf, key_ends = _packed([k or b"" for k in batch.keys])
        key_null = np.fromiter((k is None for k in batch.keys), dtype=np.uint8, count=len(batch))
        header_buf, header_ends = _packed([encode_headers(h) for h in batch.headers])
        ints = [np.ascontiguousarray(c, dtype=np.int64) for c in (batch.partitions, batch.offsets, batch.timestamps_ms)]
        columns: list[npt.NDArray[np.generic]] = [
            value_buf, value_ends, key_buf, key_ends, key_null, header_buf, header_ends, *ints
        ]  # fmt: skip
        if allocate is not None:
            return cls.joined(batch.topic, [columns], allocate)
        return cls(batch.topic, *columns)  # type: ignore[arg-type]

    @classmethod
    def joined(cls, topic: str, pieces: Sequence[Sequence[npt.NDArray[np.generic]]],
               allocate: Callable[[int], U8] | None = None) -> PackedBatch:  # fmt: skip
        """Packed pieces (each the ten columns in :meth:`columns` order) as one batch, in order.

        A worker collects a batch from several consume calls. Every column is written once, straight
        into one buffer from ``allocate`` (a backend's pooled ``input_buffer``: the device lane's is
        page-locked and read in place, with no staging copy), laid out as :meth:`of` lays it out.
        Without ``allocate``, a single piece is taken as it is and several go into a new buffer.
        """
        if len(pieces) == 1 and allocate is None:
            return cls(topic, *pieces[0])  # type: ignore[arg-type]
        sizes = joined_nbytes(pieces)
        sizes[0] += 1  # the values' byte to spare
        starts, end = _layout(sizes, _PLACE)
        buf = allocate(end) if allocate is not None else np.empty(end, dtype=np.uint8)
        places = zip(starts, sizes, COLUMN_KINDS, strict=True)
        columns = [buf[start : start + size].view(kind) for start, size, kind in places]
        join_into(pieces, columns)
        return cls(topic, *columns)

    def chunks(self, size: int) -> list[tuple[int, int]]:
        """``(start, end)`` of consecutive chunks of at most ``size`` records (as :meth:`RawBatch.chunks`)."""
        return chunk_bounds(len(self), size)

    def slice(self, start: int, end: int) -> PackedBatch:
        """Records ``start`` to ``end`` (exclusive) as a batch of their own: views of the buffers, new ends."""
        if start == 0 and end >= len(self):
            return self
        columns: list[npt.NDArray[np.generic]] = []
        for buf, ends in ((self.value_buf, self.value_ends), (self.key_buf, self.key_ends),
                          (self.header_buf, self.header_ends)):  # fmt: skip
            base = _start(ends, start)
            columns += [buf[base : _start(ends, end)], ends[start:end] - base]
        value_buf, value_ends, key_buf, key_ends, header_buf, header_ends = columns
        rows = slice(start, end)
        ordered = [value_buf, value_ends, key_buf, key_ends, self.key_null[rows], header_buf, header_ends,
                   self.partitions[rows], self.offsets[rows], self.timestamps_ms[rows]]  # fmt: skip
        return PackedBatch(self.topic, *ordered)  # type: ignore[arg-type]

    def to_raw(self) -> RawBatch:
        """The same records as Python objects (tests compare both forms)."""
        return RawBatch(
            values=list(self.values),
            keys=list(self.keys),
            headers=cast(list[Sequence[tuple[str, bytes]]], list(self.headers)),
            topic=self.topic,
            partitions=self.partitions,
            offsets=self.offsets,
            timestamps_ms=self.timestamps_ms,
        )


# A dead letter as the native core reports it: batch position, reason code, error text.
Found = Sequence[tuple[int, str, str]]


def merge_found(first: Found, second: Found) -> Found:
    """Two lists of dead letters, each in batch order, as one in batch order."""
    if not second:
        return first
    if not first:
        return second
    return list(heapq.merge(first, second))  # tuples compare by position first; positions are distinct


class DeadLetters(_Lazy[BadRecord]):
    """A packed batch's dead letters, each made into a :class:`BadRecord` when read.

    A record's raw bytes, key and headers are copied out of the batch then. The transform finds them
    without a Python object per record; the DLQ producer reads them, and a caller that only counts
    them makes none. Holding them holds the batch's buffers.
    """

    def __init__(self, batch: PackedBatch, stage: str, found: Found, more: Found = ()) -> None:
        """``found``: each dead letter's batch position, reason code and error text, in batch order.

        ``more``: others of the batch found apart (in batch order too), merged with ``found`` when read.
        """
        super().__init__(len(found) + len(more))
        self._batch, self._stage, self._parts = batch, stage, (found, more)
        self._made: list[BadRecord] | None = None

    def with_found(self, more: Found) -> DeadLetters:
        """These dead letters and ``more`` of the same batch, in batch order once read."""
        return DeadLetters(self._batch, self._stage, self._found(), more)

    def _found(self) -> Found:
        found, more = self._parts
        if more:
            self._parts = (merge_found(found, more), ())
        return self._parts[0]

    def _item(self, i: int) -> BadRecord:
        return self._records()[i]

    def _records(self) -> list[BadRecord]:
        """Every record, made on the first read (in one native pass over the batch)."""
        if self._made is None:
            import llmpipe_native

            b, stage, every = self._batch, self._stage, self._found()
            positions = np.fromiter((found[0] for found in every), dtype=np.int64, count=len(every))
            records = llmpipe_native.records_at(b.columns(), positions)
            found = zip(every, records, strict=True)
            self._made = [
                BadRecord(value, stage, Reason(reason), text, key, b.topic, partition, offset, tuple(headers))  # type: ignore[arg-type]
                for (_, reason, text), (value, key, headers, partition, offset) in found
            ]
        return self._made

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same records (a list of them, as ``parse`` gives)."""
        return isinstance(other, Sequence) and len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # compared by content, like a list
