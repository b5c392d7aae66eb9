"""The transform's input and output: one batch of raw records in, encoded rows plus dead letters out.

Both are columnar so that a GPU backend can take the values as one buffer and the worker can produce
each typed record as a slice of one encoded buffer, with no per-record Python encoding in between.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice, pairwise

import numpy as np
import numpy.typing as npt

from llmpipe.dlq import BadRecord

IntColumn = Sequence[int] | npt.NDArray[np.int64]
# A ``bytes`` object, or a view of a host buffer the device lane filled (pooled, page-locked).
RowBuffer = bytes | memoryview


@dataclass(frozen=True)
class RawBatch:
    """A batch of ``llm.raw`` records, one list (or array) per record attribute, all the same length.

    ``headers`` holds each record's Kafka headers in arrival order; a header may repeat, the last
    occurrence wins. ``timestamps_ms`` is the Kafka record timestamp (becomes ``ingest_ts``).
    """

    values: Sequence[bytes]
    keys: Sequence[bytes | None]
    headers: Sequence[Sequence[tuple[str, bytes]]]
    topic: str
    partitions: IntColumn
    offsets: IntColumn
    timestamps_ms: IntColumn

    def __post_init__(self) -> None:
        """Reject ragged batches early: every later step indexes all columns by one position."""
        n = len(self.values)
        lengths = {
            "keys": len(self.keys),
            "headers": len(self.headers),
            "partitions": len(self.partitions),
            "offsets": len(self.offsets),
            "timestamps_ms": len(self.timestamps_ms),
        }
        ragged = {name: size for name, size in lengths.items() if size != n}
        if ragged:
            msg = f"RawBatch columns differ in length from values ({n}): {ragged}"
            raise ValueError(msg)

    def __len__(self) -> int:
        """Number of records in the batch."""
        return len(self.values)

    def slice(self, start: int, end: int) -> RawBatch:
        """Records ``start`` to ``end`` (exclusive) as a batch of their own (columns sliced, not copied per record)."""
        if start == 0 and end >= len(self):
            return self
        return RawBatch(
            values=self.values[start:end],
            keys=self.keys[start:end],
            headers=self.headers[start:end],
            topic=self.topic,
            partitions=self.partitions[start:end],
            offsets=self.offsets[start:end],
            timestamps_ms=self.timestamps_ms[start:end],
        )

    def chunks(self, size: int) -> list[tuple[int, int]]:
        """``(start, end)`` of consecutive chunks of at most ``size`` records (one chunk when ``size`` is 0)."""
        return chunk_bounds(len(self), size)

    @classmethod
    def of_values(
        cls, values: Sequence[bytes], topic: str = "llm.raw", partition: int = 0, first_offset: int = 0
    ) -> RawBatch:
        """A batch of bodies with no keys or headers (tests and benchmarks)."""
        n = len(values)
        return cls(
            values=list(values),
            keys=[None] * n,
            headers=[[] for _ in range(n)],
            topic=topic,
            partitions=[partition] * n,
            offsets=list(range(first_offset, first_offset + n)),
            timestamps_ms=[0] * n,
        )


def _empty_offsets() -> npt.NDArray[np.int64]:
    return np.zeros(1, dtype=np.int64)


def _empty_rows() -> npt.NDArray[np.int64]:
    return np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class EncodedRows:
    """Avro datums of the good rows, back to back in one buffer.

    Row ``i`` (of ``len(self)``) is ``buf[offsets[i]:offsets[i + 1]]``; it came from batch position
    ``rows[i]`` and is produced with key ``keys[i]``. Rows keep batch order. ``buf`` is ``bytes`` or
    a view of the device lane's pooled output buffer (reused once nothing holds a view of it);
    :meth:`values` gives ``bytes`` either way.
    """

    buf: RowBuffer = b""
    offsets: npt.NDArray[np.int64] = field(default_factory=_empty_offsets)
    rows: npt.NDArray[np.int64] = field(default_factory=_empty_rows)
    keys: Sequence[bytes | None] = field(default_factory=list)

    def __len__(self) -> int:
        """Number of encoded rows."""
        return len(self.rows)

    def value(self, i: int) -> bytes:
        """The Avro datum of encoded row ``i``."""
        return bytes(memoryview(self.buf)[int(self.offsets[i]) : int(self.offsets[i + 1])])

    def values(self) -> Iterator[bytes]:
        """Every row's Avro datum as ``bytes``, in row order (one copy each, as a producer needs)."""
        ends = self.offsets.tolist()
        source = self.buf if isinstance(self.buf, bytes) else self.buf.tobytes()
        return map(source.__getitem__, map(slice, ends, islice(ends, 1, None)))

    def items(self) -> Iterator[tuple[int, bytes | None, bytes]]:
        """``(batch position, key, value)`` for every encoded row, in batch order."""
        return zip(self.rows.tolist(), self.keys, self.values(), strict=True)


@dataclass(frozen=True)
class ParseResult:
    """What a backend returns for one batch: every input position is in exactly one of the two."""

    encoded: EncodedRows
    bad: Sequence[BadRecord]  # a list, or a packed batch's DeadLetters (made when read)

    def __len__(self) -> int:
        """Number of input records accounted for (good plus bad)."""
        return len(self.encoded) + len(self.bad)


def chunk_bounds(n: int, size: int) -> list[tuple[int, int]]:
    """``(start, end)`` of consecutive chunks of at most ``size`` of ``n`` records (one chunk when ``size`` is 0)."""
    if size <= 0 or n <= size:
        return [(0, n)]
    count = -(-n // size)  # chunks of equal size, none much smaller than the rest
    bounds = [n * k // count for k in range(count + 1)]
    return list(pairwise(bounds))
