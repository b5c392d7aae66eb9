"""The device lane over packed batches, in a few slots: no Python object per record, no merge copy.

A :class:`~gpu_stage.transform.packed.PackedBatch` already holds its values, keys and headers back to back, so
each reaches the device with one transfer: straight from its own buffer when that is one of the
lane's page-locked input buffers (:meth:`PackedLane.input_buffer`, what a fetch fills), else after
one copy into a page-locked buffer of the slot (the values' on two threads, no GIL). Nothing is done
per record on the host. Per batch:

1. ``start``: queue the transfers (values, keys and headers: the device reads the record's own
   columns from the last two), pass 1 and the sizes' copy back on the slot's stream.
2. ``rest``: once the sizes are in, the native core transforms the rows the lane did not take, read
   in place from the packed buffers, on a native thread of its own (no Python thread: one would
   wait for the GIL to start and to return while this thread runs Python code).
3. ``middle``: every good row's final offset follows from both sets of sizes (one prefix sum in
   batch order); queue pass 2, which writes the lane's rows at those offsets, and the copy of the
   whole output into a pooled page-locked buffer.
4. ``finish``: wait for that copy; the native core's rows go into the gaps left for them.

:meth:`PackedLane.stream` keeps batches in flight in S slots (:attr:`Executor.slots`, which the lane
sets from ``TransformSettings.lane_slots``: three by default). Batch k+S is queued into batch k's
slot as soon as k's pass 2 is: the slot's stream runs its copy in right after that pass 2 (which
still reads k's values), so the device never waits for this thread to come back from batch k. Then
batch k+1's pass 2 is queued (the device runs it after k's: they share the output buffer), and only
then does this thread wait, for k+2's pass 1 (whose rows the native core then does on its own native
thread) and for k's output. With three slots or more, batches k+3 … have their copy in and pass 1
queued too: the device runs them while this thread turns k+2's sizes into its pass 2. The output is
byte-identical to the native core on the same records (the tests hold it so).
"""

from __future__ import annotations

import bisect
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.batch import EncodedRows, ParseResult
from gpu_stage.transform.device.columns import I64, LaneInput
from gpu_stage.transform.device.executor import Executor
from gpu_stage.transform.device.merge import LaneFound
from gpu_stage.transform.device.slots import NOT_TAKEN
from gpu_stage.transform.native import NativeBackend, NativeRun, Packed
from gpu_stage.transform.packed import PackedBatch, Picked
from gpu_stage.transform.pool import HostPool
from gpu_stage.transform.stages import StageClock
from llmpipe.dlq import BadRecord
from llmpipe.packed import last_end

U8 = npt.NDArray[np.uint8]


class InputBuffers:
    """The input buffers handed out, by address, for as long as something else holds them.

    A batch's columns are looked up here several times per batch, and a caller may hold many packed
    batches at once (a benchmark packs its whole run first), so a lookup bisects the buffers' sorted
    start addresses instead of trying each buffer: buffers do not overlap, so only the one starting
    last at or before an address can hold it. Starts of buffers that have died are dropped when a
    lookup meets them, and all of them when they outnumber the live buffers.
    """

    def __init__(self) -> None:
        """An empty index."""
        self._by_start: weakref.WeakValueDictionary[int, U8] = weakref.WeakValueDictionary()
        self._starts: list[int] = []  # sorted; may hold starts of buffers that have died since

    def add(self, buffer: U8) -> None:
        """Index ``buffer`` until it dies (a new buffer at a dead one's address replaces it)."""
        start = _address(buffer)
        if start not in self._by_start:
            if len(self._starts) > 2 * len(self._by_start) + 16:
                self._starts = sorted(self._by_start.keys())
            at = bisect.bisect_left(self._starts, start)
            if at == len(self._starts) or self._starts[at] != start:
                self._starts.insert(at, start)
        self._by_start[start] = buffer

    def holder(self, buf: npt.NDArray[Any]) -> U8 | None:
        """The indexed buffer that ``buf`` lies wholly inside, if any (None for an empty ``buf``)."""
        if buf.nbytes == 0:
            return None
        at = _address(buf)
        i = bisect.bisect_right(self._starts, at) - 1
        while i >= 0:
            start = self._starts[i]
            held = self._by_start.get(start)
            if held is None:  # died since it was indexed
                del self._starts[i]
                i -= 1
                continue
            return held if at + buf.nbytes <= start + held.nbytes else None
        return None

    def __len__(self) -> int:
        """Live buffers indexed."""
        return len(self._by_start)


def _address(array: npt.NDArray[Any]) -> int:
    return int(array.__array_interface__["data"][0])


@dataclass
class _Job:
    """One packed batch on its way through the lane."""

    batch: PackedBatch
    slot: int
    handle: Any = None
    rows: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    offsets: I64 = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    sizes: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    out: U8 | None = None
    rest: tuple[bytes, I64, I64] | None = None
    bad: Sequence[BadRecord] = field(default_factory=list)
    taken: int = 0


class PackedLane:
    """The device lane plus the native core over packed batches (see the module docstring)."""

    def __init__(self, native: NativeBackend, executor: Executor, clock: StageClock | None = None) -> None:
        """``native`` does the rows the lane does not take; ``executor`` runs the passes."""
        self.native = native
        self.executor = executor
        self.clock = clock or StageClock()
        self.pool = HostPool(executor._allocate_host)
        self.inputs = HostPool(executor._allocate_host)
        self._inputs = InputBuffers()
        self.rows = 0
        self.taken_rows = 0
        self.copied_batches = 0

    def input_buffer(self, size: int) -> U8:
        """A host buffer (page-locked for the device) to pack a batch into (``PackedBatch.of``'s ``allocate``).

        A batch's columns that lie in such a buffer go to the device from there, with no copy; a
        batch whose values lie elsewhere has them copied into the slot's own page-locked buffer first.
        """
        buffer = self.inputs.take(size + 1)
        self._inputs.add(buffer)
        return buffer

    def _holder(self, buf: npt.NDArray[Any]) -> U8 | None:
        """The buffer from :meth:`input_buffer` that ``buf`` (not empty) lies inside, if any."""
        return self._inputs.holder(buf)

    def _in_place(self, buf: npt.NDArray[Any]) -> bool:
        """Whether ``buf`` (not empty) lies inside a buffer from :meth:`input_buffer`."""
        return self._holder(buf) is not None

    def stream(self, batches: Iterable[PackedBatch], overlap: bool = True) -> Iterator[ParseResult]:
        """Every batch's result, in order; with ``overlap``, batch k+1 starts before batch k finishes."""
        source = iter(batches)
        if not overlap:
            for batch in source:
                alone = self._start(batch, 0)
                self._middle(alone, self._rest_of(self._rest_rows(self._measured(alone))))
                yield self._finish(alone)
            return
        # The native core does a batch's other rows on a thread of its own; device calls stay on this one.
        job = self._next(source, 0)
        if job is None:
            return
        queued = self._fill(source)
        self._middle(job, self._rest_of(self._rest_rows(self._measured(job))))
        upcoming = queued.popleft() if queued else None
        rest = None if upcoming is None else self._rest_rows(self._measured(upcoming))
        while job is not None:
            # Batch k's pass 2 is queued; batch k+1's pass 1 is done and the native core has its rows;
            # batches k+2 … k+S-1 have pass 1 queued. Batch k+S goes into k's slot now: its stream runs
            # k+S's copy in right after k's pass 2, with no wait for this thread, and k+1's pass 2 is
            # queued before this thread waits for anything of k+2's.
            after = self._next(source, job.slot)
            if after is not None:
                queued.append(after)
            if upcoming is not None and rest is not None:
                self._middle(upcoming, self._rest_of(rest))
            following = queued.popleft() if queued else None
            rest = None if following is None else self._rest_rows(self._measured(following))
            yield self._finish(job)
            job, upcoming = upcoming, following

    def _fill(self, source: Iterator[PackedBatch]) -> deque[_Job]:
        """Batches 1 … S-1 of a stream, each queued into a slot of its own behind batch 0 (S: the executor's slots)."""
        queued: deque[_Job] = deque()
        for slot in range(1, self.executor.slots):
            ahead = self._next(source, slot)
            if ahead is None:
                break
            queued.append(ahead)
        return queued

    def _rest_of(self, rest: tuple[I64, NativeRun]) -> tuple[I64, Packed]:
        """The native core's result for a batch's other rows, once its thread has it.

        ``lane_rest_native`` is that thread's time on them; ``lane_wait_rest`` this one's wait.
        """
        slow, run = rest
        with self.clock.stage("lane_wait_rest"):
            done = run.result()
        self.clock.add("lane_rest_native", run.seconds)
        return slow, done

    def _next(self, source: Iterator[PackedBatch], slot: int) -> _Job | None:
        batch = next(source, None)
        return None if batch is None else self._start(batch, slot)

    def _start(self, batch: PackedBatch, slot: int) -> _Job:
        job = _Job(batch, slot)
        n = len(batch)
        if n == 0:
            return job
        with self.clock.stage("lane_pack"):
            if self._in_place(batch.value_buf):
                staging = None
            else:
                staging = self.executor.staging(batch.value_bytes + 1, slot)
                self.copied_batches += 1
            li = _lane_input(batch, staging, self._holder)
        with self.clock.stage("lane_submit"):
            job.handle = self.executor.submit(li, n, slot)
        return job

    def _measured(self, job: _Job) -> _Job:
        """Wait for pass 1 of ``job`` (its sizes)."""
        if len(job.batch):
            with self.clock.stage("lane_wait_pass1"):
                job.sizes = self.executor.sizes(job.handle)
        return job

    def _rest_rows(self, job: _Job) -> tuple[I64, NativeRun]:
        """The rows the lane did not take, and the native core started on them."""
        slow = np.flatnonzero(job.sizes == NOT_TAKEN)
        return slow, self.native.start_packed(job.batch, slow)

    def _middle(self, job: _Job, rest: tuple[I64, Packed]) -> None:
        """Every good row's offset in batch order; queue pass 2 for the lane's rows."""
        n = len(job.batch)
        if n == 0:
            return
        slow, (rest_buf, rest_ends, rest_rows, bad) = rest
        job.bad = bad.with_found(LaneFound.of(job.sizes))
        with self.clock.stage("lane_offsets"):
            job.rows, job.offsets, starts, rest_starts = _offsets(job.sizes, rest_rows, rest_ends)
        total = int(job.offsets[-1])
        with self.clock.stage("lane_take"):
            job.out = self.pool.take(total)
        job.rest = (rest_buf, rest_ends, rest_starts)
        job.taken = n - len(slow)
        with self.clock.stage("lane_submit"):
            self.executor.submit_write(job.handle, starts, job.offsets, job.out, job.rows)

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


def _offsets(sizes: I64, rest_rows: I64, rest_ends: I64) -> tuple[I64, I64, I64, I64]:
    """A batch's good rows, their offsets, each lane row's start (-1 for the others) and the native rows' starts.

    ``sizes`` are pass 1's (negative where the lane wrote no row); the native core's good rows are
    ``rest_rows``, encoded back to back up to ``rest_ends``. One native pass, without the GIL.
    """
    import llmpipe_native

    n = len(sizes)
    rows, offsets = np.empty(n, dtype=np.int64), np.empty(n + 1, dtype=np.int64)
    starts, rest_starts = np.empty(n, dtype=np.int64), np.empty(len(rest_rows), dtype=np.int64)
    good = llmpipe_native.lane_offsets(sizes, rest_rows, rest_ends, rows, offsets, starts, rest_starts)
    return rows[:good], offsets[: good + 1], starts, rest_starts


def _lane_input(batch: PackedBatch, staging: U8 | None, holder: Callable[[U8], U8 | None]) -> LaneInput:
    """The lane's input for a packed batch: its columns as they are, the values copied into ``staging``.

    With ``staging`` None the values are read where they are (a page-locked input buffer with a
    byte to spare). ``holder`` tells which page-locked input buffer a column lies in, if any: the
    columns that do are marked pinned, and the values' buffer is the batch's block (one copy to
    the device when every column lies in it: :meth:`LaneInput.block_layout`).
    The columns are checked first: the device reads by their ends.
    """
    import llmpipe_native

    llmpipe_native.check_packed(batch.columns())
    total = batch.value_bytes
    if staging is None:
        values = batch.value_buf[: max(total, 1)]  # an input buffer has a byte to spare
    else:
        llmpipe_native.copy_into(batch.value_buf[:total], staging[:total])
        values = staging[: max(total, 1)]
    keys = batch.key_buf[: last_end(batch.key_ends)]
    headers = batch.header_buf[: last_end(batch.header_ends)]
    li = LaneInput(
        values,
        batch.value_ends,
        keys,
        batch.key_ends,
        batch.key_null,
        headers,
        batch.header_ends,
        batch.partitions,
        batch.offsets,
        batch.timestamps_ms,
    )
    li.pinned = frozenset(name for name, column in li.columns().items() if holder(column) is not None)
    li.block = holder(values) if staging is None else None  # its layout says whether all lie in it
    return li
