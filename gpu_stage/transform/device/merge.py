"""The lane's rows and the native core's rows put back together in batch order."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import ClassVar, overload

import numpy as np

from gpu_stage.transform.api import dead_letter
from gpu_stage.transform.batch import EncodedRows, ParseResult, RawBatch
from gpu_stage.transform.contract.extract import UPSTREAM_ERROR_TEXT
from gpu_stage.transform.contract.reference import INVALID_JSON_TEXT, INVALID_UTF8_TEXT, NOT_AN_OBJECT_TEXT
from gpu_stage.transform.device import slots as layout
from gpu_stage.transform.device.columns import I64
from gpu_stage.transform.packed import Found, merge_found
from llmpipe.dlq import Reason

log = logging.getLogger(__name__)


def starts_of(sizes: I64) -> tuple[I64, I64, I64]:
    """Each taken row's offset (-1 where not taken), the taken positions, and the taken rows' offsets."""
    taken = np.flatnonzero(sizes >= 0)
    kept = sizes[taken]
    offsets = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum(kept, out=offsets[1:])
    starts = np.full(len(sizes), -1, dtype=np.int64)
    starts[taken] = offsets[:-1]
    return starts, taken, offsets


def merge(batch: RawBatch, fast: EncodedRows, slow: EncodedRows) -> EncodedRows:
    """Both results' rows in batch order, copied once into one ``bytes`` (one slice per run of adjacent rows).

    ``fast.buf`` may be any buffer (the lane's page-locked output, reused by the next batch): the
    result never refers to it.
    """
    if len(slow) == 0 or len(fast) == 0:
        rows = fast if len(slow) == 0 else slow
        return EncodedRows(bytes(rows.buf), rows.offsets, rows.rows, [batch.keys[i] for i in rows.rows.tolist()])
    positions = np.concatenate([fast.rows, slow.rows])
    order = np.argsort(positions, kind="stable")
    lengths = np.concatenate([np.diff(fast.offsets), np.diff(slow.offsets)])[order]
    starts = np.concatenate([fast.offsets[:-1], slow.offsets[:-1]])[order]
    source = (order >= len(fast)).astype(np.int8)
    ends = starts + lengths
    breaks = np.flatnonzero((starts[1:] != ends[:-1]) | (source[1:] != source[:-1])) + 1
    firsts = np.concatenate([[0], breaks]).tolist()
    lasts = np.concatenate([breaks - 1, [len(order) - 1]]).tolist()
    views = (memoryview(fast.buf).cast("B"), memoryview(slow.buf))
    src, st, en = source.tolist(), starts.tolist(), ends.tolist()
    buf = b"".join(views[src[i]][st[i] : en[j]] for i, j in zip(firsts, lasts, strict=True))
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    merged = positions[order]
    return EncodedRows(buf, offsets, merged, [batch.keys[i] for i in merged.tolist()])


def int_columns(batch: RawBatch) -> tuple[I64, I64, I64]:
    """The batch's partitions, offsets and timestamps as contiguous int64 arrays (converted once)."""
    columns = (batch.partitions, batch.offsets, batch.timestamps_ms)
    return tuple(np.ascontiguousarray(c, dtype=np.int64) for c in columns)  # type: ignore[return-value]


def sub_batch(batch: RawBatch, positions: I64, columns: tuple[I64, I64, I64] | None = None) -> RawBatch:
    """The records at ``positions`` as a batch of their own (for the native core)."""
    partitions, offsets, timestamps = columns or int_columns(batch)
    picks = positions.tolist()
    return RawBatch(
        values=[batch.values[i] for i in picks],
        keys=[batch.keys[i] for i in picks],
        headers=[batch.headers[i] for i in picks],
        topic=batch.topic,
        partitions=partitions[positions],
        offsets=offsets[positions],
        timestamps_ms=timestamps[positions],
    )


def combine(
    batch: RawBatch,
    fast: EncodedRows,
    rest: tuple[EncodedRows, Found],
    rest_positions: I64,
    lanes: LaneFound,
    stage: str,
) -> ParseResult:
    """The lane's rows and dead letters plus the native core's for the bodies the lane left, in batch order.

    ``rest`` is the native core's result on the sub-batch of ``rest_positions``; ``lanes`` are the
    dead letters the lane found.
    """
    slow, found = rest
    slow_rows = EncodedRows(slow.buf, slow.offsets, rest_positions[slow.rows], [])
    at = rest_positions.tolist()
    dead = merge_found([(at[i], reason, text) for i, reason, text in found], lanes)
    bad = [dead_letter(batch, i, stage, Reason(reason), text) for i, reason, text in dead]
    return ParseResult(merge(batch, fast, slow_rows), bad)


class LaneFound(Sequence[tuple[int, str, str]]):
    """The dead letters pass 1 found, as the native core reports them: ``(position, reason, text)``.

    Pass 1 gives each a code in place of a size (``slots.UPSTREAM_ERROR`` and below), and its
    text is a constant. Each tuple is made when read: a packed batch's dead letters are only counted
    on the hot path (:class:`~gpu_stage.transform.packed.DeadLetters` makes them when read), so a tuple per
    dead letter there would be wasted work.
    """

    _BY_CODE: ClassVar[dict[int, tuple[str, str]]] = {
        layout.UPSTREAM_ERROR: (Reason.UPSTREAM_ERROR.value, UPSTREAM_ERROR_TEXT),
        layout.NOT_AN_OBJECT: (Reason.NOT_AN_OBJECT.value, NOT_AN_OBJECT_TEXT),
        layout.INVALID_JSON: (Reason.INVALID_JSON.value, INVALID_JSON_TEXT),
        layout.INVALID_UTF8: (Reason.INVALID_UTF8.value, INVALID_UTF8_TEXT),
    }

    def __init__(self, positions: I64, codes: I64) -> None:
        """``positions``: the dead letters' batch positions, ascending; ``codes``: pass 1's code for each."""
        self._positions = positions
        self._codes = codes

    @classmethod
    def of(cls, sizes: I64) -> LaneFound:
        """The dead letters among pass 1's ``sizes``."""
        positions = np.flatnonzero(sizes <= layout.UPSTREAM_ERROR)
        return cls(positions, sizes[positions])

    def __len__(self) -> int:
        return len(self._positions)

    def __iter__(self) -> Iterator[tuple[int, str, str]]:
        by_code = self._BY_CODE
        return ((i, *by_code[code]) for i, code in zip(self._positions.tolist(), self._codes.tolist(), strict=True))

    @overload
    def __getitem__(self, k: int) -> tuple[int, str, str]: ...
    @overload
    def __getitem__(self, k: slice) -> list[tuple[int, str, str]]: ...
    def __getitem__(self, k: int | slice) -> tuple[int, str, str] | list[tuple[int, str, str]]:
        if isinstance(k, slice):
            return list(LaneFound(self._positions[k], self._codes[k]))
        return (int(self._positions[k]), *self._BY_CODE[int(self._codes[k])])
