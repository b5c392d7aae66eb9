"""The device lane over packed batches, two batches in flight: no Python object per record, no merge copy.

A :class:`~gpu_stage.packed.PackedBatch` already holds its values back to back, so a batch reaches the
device with one copy into page-locked memory (two threads, no GIL) and one transfer. Per batch:

1. ``start``: values into the slot's page-locked buffer, the record segments from the native core;
   queue the transfers, pass 1 and the sizes' copy back on the slot's stream.
2. ``middle``: wait for the sizes; the native core transforms the rows the lane did not take, read
   in place from the packed buffers; every good row's final offset follows from both sets of sizes
   (one prefix sum in batch order); queue pass 2, which writes the lane's rows at those offsets,
   and the copy of the whole output into a pooled page-locked buffer.
3. ``finish``: wait for that copy; the native core's rows go into the gaps left for them.

:meth:`PackedLane.stream` runs ``start`` of batch k+1 between ``middle`` and ``finish`` of batch k, so
the copy in of the next batch overlaps the device's pass 2 and copy out of this one, and the device's
transfers and pass 1 of the next batch overlap this batch's finish. The output is byte-identical to
the native core on the same records (the tests hold it so).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu_stage.backends.lane import I64, Executor, LaneInput
from gpu_stage.backends.native import NativeBackend
from gpu_stage.backends.stages import StageClock
from gpu_stage.batch import EncodedRows, ParseResult
from gpu_stage.packed import PackedBatch, Picked
from llmpipe.dlq import BadRecord

U8 = npt.NDArray[np.uint8]


class HostPool:
    """Host buffers for the lane's output, reused once nothing refers to them any more.

    A result's ``buf`` is a view of a pooled buffer; every view (and every view of a view) holds a
    reference to the buffer, so a buffer whose reference count is back to the pool's own is free.
    Past ``keep`` buffers, a taken-but-busy pool allocates buffers that are not pooled.
    """

    def __init__(self, allocate: Callable[[int], U8], keep: int = 4) -> None:
        """``allocate(size)`` makes a buffer (page-locked for the device); at most ``keep`` are pooled."""
        self._allocate = allocate
        self._keep = keep
        self._buffers: list[U8] = []

    def take(self, size: int) -> U8:
        """A buffer of at least ``size`` bytes that nothing else refers to."""
        free = [b for b in self._buffers if sys.getrefcount(b) <= _POOLED_REFS]
        fits = [b for b in free if len(b) >= size]
        if fits:
            return min(fits, key=len)
        if free:  # grow: drop the largest free buffer that is too small
            largest = max(free, key=len)
            self._buffers = [b for b in self._buffers if b is not largest]
        buffer = self._allocate(max(size, 1))
        if len(self._buffers) < self._keep:
            self._buffers.append(buffer)
        return buffer

    def held_bytes(self) -> int:
        """Bytes of the pooled buffers."""
        return sum(len(b) for b in self._buffers)


# A pooled buffer's references when nothing outside the pool holds it: the list, the comprehension's
# loop variable and getrefcount's own argument.
_POOLED_REFS = 3


@dataclass
class _Job:
    """One packed batch on its way through the lane."""

    batch: PackedBatch
    slot: int
    handle: Any = None
    rows: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    offsets: I64 = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    out: U8 | None = None
    rest: tuple[bytes, I64, I64] | None = None
    bad: list[BadRecord] = field(default_factory=list)
    taken: int = 0


class PackedLane:
    """The device lane plus the native core over packed batches (see the module docstring)."""

    def __init__(self, native: NativeBackend, executor: Executor, clock: StageClock | None = None) -> None:
        """``native`` does the rows the lane does not take; ``executor`` runs the passes."""
        self.native = native
        self.executor = executor
        self.clock = clock or StageClock()
        self.pool = HostPool(executor._allocate_host)
        self.rows = 0
        self.taken_rows = 0

    def parse(self, batch: PackedBatch) -> ParseResult:
        """One batch, nothing overlapped."""
        return next(iter(self.stream([batch], overlap=False)))

    def stream(self, batches: Iterable[PackedBatch], overlap: bool = True) -> Iterator[ParseResult]:
        """Every batch's result, in order; with ``overlap``, batch k+1 starts before batch k finishes."""
        source = iter(batches)
        slots = self.executor.SLOTS if overlap else 1
        job = self._next(source, 0)
        while job is not None:
            self._middle(job)
            upcoming = self._next(source, (job.slot + 1) % slots) if overlap else None
            result = self._finish(job)
            if not overlap:
                upcoming = self._next(source, job.slot)
            yield result
            job = upcoming

    def _next(self, source: Iterator[PackedBatch], slot: int) -> _Job | None:
        batch = next(source, None)
        return None if batch is None else self._start(batch, slot)

    def _start(self, batch: PackedBatch, slot: int) -> _Job:
        job = _Job(batch, slot)
        n = len(batch)
        if n == 0:
            return job
        with self.clock.stage("lane_pack"):
            li = _lane_input(self.native, batch, self.executor.staging(batch.value_bytes + 1, slot))
        with self.clock.stage("lane_submit"):
            job.handle = self.executor.submit(li, n, slot)
        return job

    def _middle(self, job: _Job) -> None:
        n = len(job.batch)
        if n == 0:
            return
        with self.clock.stage("lane_wait_pass1"):
            sizes = self.executor.sizes(job.handle)
        slow = np.flatnonzero(sizes < 0)
        with self.clock.stage("lane_rest_native"):
            rest_buf, rest_ends, rest_rows, job.bad = self.native.run_packed(job.batch, slow)
        with self.clock.stage("lane_offsets"):
            full = sizes.copy()
            full[rest_rows] = np.diff(rest_ends, prepend=0)
            job.rows = np.flatnonzero(full >= 0)
            job.offsets = np.zeros(len(job.rows) + 1, dtype=np.int64)
            np.cumsum(full[job.rows], out=job.offsets[1:])
            starts = np.full(n, -1, dtype=np.int64)
            starts[job.rows] = job.offsets[:-1]
            rest_starts = starts[rest_rows]
            starts[slow] = -1  # pass 2 leaves the native core's rows to the host
        total = int(job.offsets[-1])
        job.out = self.pool.take(total)
        job.rest = (rest_buf, rest_ends, rest_starts)
        job.taken = n - len(slow)
        with self.clock.stage("lane_submit"):
            self.executor.submit_write(job.handle, starts, total, job.out)

    def _finish(self, job: _Job) -> ParseResult:
        n = len(job.batch)
        if n == 0:
            return ParseResult(EncodedRows(), [])
        import llmpipe_native

        assert job.out is not None and job.rest is not None
        with self.clock.stage("lane_wait_pass2"):
            self.executor.wait(job.handle)
        total = int(job.offsets[-1])
        with self.clock.stage("lane_place"):
            rest_buf, rest_ends, rest_starts = job.rest
            if len(rest_ends):
                llmpipe_native.place(job.out, rest_buf, rest_ends, rest_starts)
        self.rows += n
        self.taken_rows += job.taken
        buf = job.out.data[:total]  # a view that holds the pooled buffer (see HostPool)
        keys = Picked(job.batch.keys, job.rows)
        return ParseResult(EncodedRows(buf, job.offsets, job.rows, keys), job.bad)


def _lane_input(native: NativeBackend, batch: PackedBatch, staging: U8) -> LaneInput:
    """The lane's input for a packed batch: values copied into ``staging``, record segments encoded."""
    import llmpipe_native

    total = batch.value_bytes
    llmpipe_native.copy_into(batch.value_buf[:total], staging[:total])
    meta, meta_ends = native._core.lane_meta_packed(batch.columns())
    return LaneInput(
        staging[: max(total, 1)],
        batch.value_ends,
        np.frombuffer(meta, dtype=np.uint8),
        np.frombuffer(meta_ends, dtype=np.int64),
        batch.partitions,
        batch.offsets,
        batch.timestamps_ms,
    )
