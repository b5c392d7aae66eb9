"""Where the lane's two passes run: the :class:`Executor` interface, and the CPU one the tests use.

The CUDA executor is :class:`gpu_stage.transform.device.cuda.CudaExecutor`. Both cut pass 2's output
into pieces at row boundaries (:func:`write_pieces`), launch each piece over its own rows
(:func:`piece_rows`), and have their threads take the rows in the order
:mod:`gpu_stage.transform.device.order` makes (:attr:`Executor.lane_order`).
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.api import DEALT_LANES, ORDERED_LANES, POLL_S, DeviceWait, LaneOrder
from gpu_stage.transform.device import slots as layout
from gpu_stage.transform.device.columns import I64, LaneInput
from gpu_stage.transform.device.kernels import compile_lane
from gpu_stage.transform.device.merge import starts_of
from gpu_stage.transform.device.order import CLASSES, WHOLE_BATCH
from gpu_stage.transform.device.tables import ContentTables

log = logging.getLogger(__name__)

I32 = npt.NDArray[np.int32]


def write_pieces(offsets: I64, piece_bytes: int) -> list[tuple[int, int]]:
    """The output ``[0, offsets[-1])`` cut at row boundaries (``offsets``, ascending) into pieces.

    Each piece ends at the first boundary at or after the next multiple of ``piece_bytes`` past its
    start, so it holds at most ``piece_bytes`` plus one row. No pieces for an empty output; one for
    ``piece_bytes`` 0.
    """
    total = int(offsets[-1])
    if piece_bytes <= 0:
        return [(0, total)] if total else []
    cuts = [0]
    while cuts[-1] < total:
        at = int(np.searchsorted(offsets, cuts[-1] + piece_bytes, side="left"))
        cuts.append(int(offsets[min(at, len(offsets) - 1)]))
    return list(itertools.pairwise(cuts))


def piece_rows(pieces: list[tuple[int, int]], offsets: I64, rows: I64 | None, n: int) -> I64 | None:
    """The rows of each of pass 2's ``pieces``: piece ``k`` writes only rows of ``[bounds[k], bounds[k + 1])``.

    ``offsets`` are the output's row boundaries and ``rows`` the batch row of each (``offsets[i]``
    starts row ``rows[i]``'s datum). A piece's rows start at the row whose datum starts the piece
    (0 for the first; the last piece's end at ``n``), so a row with no datum goes with the piece
    before it. None without ``rows``: each piece then looks at every row.
    """
    if rows is None:
        return None
    bounds = np.empty(len(pieces) + 1, dtype=np.int64)
    bounds[0], bounds[-1] = 0, n
    firsts = np.searchsorted(offsets, [lo for lo, _ in pieces[1:]], side="left")
    bounds[1:-1] = rows[firsts]
    return bounds


def wait_for(done: Any, how: DeviceWait, poll_s: float = POLL_S) -> None:
    """Return once ``done`` (a CUDA event) has happened, waiting the way ``how`` says.

    ``driver`` is the event's own ``synchronize``: with fewer CUDA contexts than cores the driver
    spins a core until the device gets there, and with several GPU workers on a host those spinning
    threads take cores the workers' Kafka and producing threads need. ``poll`` asks the event
    every ``poll_s`` and sleeps in between, which costs at most ``poll_s`` more per wait. ``block``
    is the event's ``synchronize`` too: the executor made the event for blocking waits, so the driver
    puts the thread to sleep until the device gets there.
    """
    if how != "poll":
        done.synchronize()
        return
    while not done.query():
        time.sleep(poll_s)


class Executor:
    """Runs the two passes somewhere, for one batch at a time in each of a few slots.

    The steps are split so a caller can overlap batches: :meth:`submit` starts pass 1 of a batch in
    a slot, :meth:`sizes` waits for its sizes, :meth:`submit_write` starts pass 2 into a host buffer,
    :meth:`wait` waits for that buffer. A slot's buffers are reused by the next batch in that slot.
    """

    slots = 2
    """Batches a stream keeps on the device at once, each in a slot of its own (stream and buffers;
    ``TransformSettings.lane_slots``, 3 by default, set by the lane). Two: one batch's pass 2 runs
    while the next one's pass 1 does. Three: another batch's copy in and pass 1 are queued as well,
    so that the device has work while this thread turns a batch's sizes into its pass 2, at the
    price of one more slot's buffers on the device."""
    device_wait: DeviceWait = "driver"
    """How :meth:`sizes` and :meth:`wait` wait for the device (``TransformSettings.device_wait``, set
    by the lane; see :func:`wait_for`). Nothing to wait for on the CPU."""
    write_warp = 0
    """1: pass 2 gives each row a warp, from the ``-warp`` build (:mod:`gpu_stage.transform.device.warp`),
    the rows as they came whatever pass 1's order; 0: a thread per row, in pass 1's order. The output
    is the same."""
    write_spans = layout.SPANS
    """Long strings a row may leave to spans in pass 2 with a thread per row (0: none), then copied a
    warp a row by ``copy_spans`` (:func:`gpu_stage.transform.device.emit.put_dec_text`). The output
    is the same."""
    lane_order: LaneOrder = "arrival"
    """Which row each thread takes (``TransformSettings.lane_order``, set by the lane): ``arrival``,
    as they came; ``length``, rows of like body length side by side, and ``balanced``, the same rows
    dealt so that every warp holds about the same bytes (:mod:`gpu_stage.transform.device.order`);
    ``warp``, a warp per row in pass 1, built from the ``-warp`` target
    (:mod:`gpu_stage.transform.device.warp`). The output is the same."""

    def __init__(self) -> None:
        """No host buffers yet: they are allocated at first use and grow with the batches."""
        self._held: dict[str, npt.NDArray[Any]] = {}

    @property
    def span_columns(self) -> int:
        """Columns of pass 2's spans array: one (no spans) with a warp per row, which copies 32 bytes a step itself."""
        return layout.span_columns(0 if self.write_warp else self.write_spans)

    def _host(self, name: str, size: int, dtype: Any = np.uint8) -> npt.NDArray[Any]:
        """A host buffer of at least ``size`` items kept under ``name``; it grows by half when too small."""
        held = self._held.get(name)
        if held is None or len(held) < size or held.dtype != dtype:
            grown = int(len(held) * 1.5) if held is not None and held.dtype == dtype else 0
            held = self._held[name] = self._allocate_host(max(size, grown), dtype)
        return held

    def staging(self, size: int, slot: int = 0) -> npt.NDArray[np.uint8]:
        """A host buffer of at least ``size`` bytes for slot ``slot``'s values, reused between batches."""
        return self._host(f"staging.{slot}", size)

    def _allocate_host(self, size: int, dtype: Any = np.uint8) -> npt.NDArray[Any]:
        return np.empty(max(size, 1), dtype=dtype)

    def submit(self, li: LaneInput, n: int, slot: int) -> Any:
        """Start pass 1 of a packed batch in ``slot``; returns the handle the other steps take."""
        raise NotImplementedError

    def sizes(self, handle: Any) -> I64:
        """Wait for pass 1: each row's encoded size, or ``slots.NOT_TAKEN`` / ``UPSTREAM_ERROR``."""
        raise NotImplementedError

    def submit_write(
        self, handle: Any, starts: I64, offsets: I64, out: npt.NDArray[np.uint8], rows: I64 | None = None
    ) -> None:
        """Start pass 2: each taken row's datum at ``starts[r]`` (-1: skip) of ``out``.

        ``offsets`` are the output's row boundaries, ascending from 0 to its size (the rows the
        native core fills in included): an executor may write the output in pieces cut there.
        ``rows`` are the batch rows whose datums start at ``offsets[:-1]``: with them a piece's
        launch takes that piece's rows only (:func:`piece_rows`), else every row.
        """
        raise NotImplementedError

    def wait(self, handle: Any) -> None:
        """Wait until pass 2 of ``handle`` has filled its host buffer."""
        raise NotImplementedError

    def encode(self, li: LaneInput, n: int) -> tuple[I64, I64, I64, Any]:
        """``(sizes, taken positions, taken rows' offsets, buffer)`` for one packed batch, taken rows only.

        The buffer may be the executor's own (reused by the next batch): callers copy out of it.
        """
        handle = self.submit(li, n, 0)
        sizes = self.sizes(handle)
        starts, taken, offsets = starts_of(sizes)
        total = int(offsets[-1])
        out = self._host("out", total)
        self.submit_write(handle, starts, offsets, out, taken)
        self.wait(handle)
        return sizes, taken, offsets, out[:total]


@dataclass
class _CpuPass:
    """A batch between the passes on the CPU: its input, string marks, decoded values, pass 1's row state and row order.

    With ``length``, ``classes`` are the rows' length classes (pass 2 sorts each piece's rows by
    them) and ``order`` the rows in the order pass 1's threads took them; None with ``arrival``.
    """

    li: LaneInput
    marks: npt.NDArray[np.uint16]
    decoded: npt.NDArray[np.uint8]
    slots: I64
    content: tuple[Any, ...]
    sizes: I64
    classes: npt.NDArray[np.uint8] | None = None
    order: I64 | None = None


class CpuExecutor(Executor):
    """The lane compiled for the CPU: the same code as on the device, what the tests compare.

    The device's row order too (:attr:`Executor.lane_order`), and pass 2's pieces where
    :attr:`write_piece_bytes` asks for them (by default, the output in one piece).
    """

    def __init__(self, tables: ContentTables, max_bytes: int, cache: Path | None = None, registers: int = 0) -> None:
        """Compile the lane with numba for this CPU (or load it from ``cache``).

        ``registers``, pass 1's register cap on a device, means nothing on the CPU: it is kept only
        to be reported (:attr:`registers`).
        """
        super().__init__()
        self.registers = registers
        self.fns = compile_lane("cpu", cache)
        warps = compile_lane("cpu-warp", cache)
        self.mark = warps.mark
        """The strings pass, a warp a row as on the device (the ``cpu-warp`` build's)."""
        self.copy_spans = warps.copy_spans
        """Pass 2's spans copied a warp a row, as on the device."""
        self.cache = cache
        self.tables = tables
        self.max_bytes = max_bytes
        self.write_piece_bytes = 0
        """Pass 2's largest output piece, as the CUDA executor's (0: the whole output in one piece)."""

    def row_order(self, value_ends: I64) -> tuple[npt.NDArray[np.uint8], I64]:
        """Each row's length class, and the rows sorted by it, dealt with ``balanced`` (pass 1's order)."""
        n = len(value_ends)
        classes = np.zeros(n, dtype=np.uint8)
        order = np.empty(n, dtype=np.int64)
        counts = np.zeros(CLASSES, dtype=np.int32)
        self.fns.length_classes(value_ends, classes, counts)
        self._place(classes, np.array(WHOLE_BATCH, dtype=np.int64), counts, order)
        return classes, order

    def piece_order(self, classes: npt.NDArray[np.uint8], bounds: I64, order: I64) -> None:
        """``order`` made pass 2's: each piece's rows (``bounds``: :func:`piece_rows`) in its own span, by class."""
        counts = np.zeros((len(bounds) - 1) * CLASSES, dtype=np.int32)
        self.fns.count_classes(classes, bounds, counts)
        self._place(classes, bounds, counts, order)

    def _place(self, classes: npt.NDArray[np.uint8], bounds: I64, counts: I32, order: I64) -> None:
        cursors = np.empty_like(counts)
        self.fns.class_starts(bounds, counts, cursors)
        if self.lane_order not in DEALT_LANES:
            self.fns.place_rows(classes, bounds, cursors, order)
            return
        by_class = np.empty_like(order)
        self.fns.place_rows(classes, bounds, cursors, by_class)
        self.fns.deal_rows(by_class, bounds, order)

    def submit(self, li: LaneInput, n: int, slot: int) -> _CpuPass:
        """Pass 1, run here and now: the values are only read, their strings decoded into a buffer of the batch's."""
        width = max(self.tables.nprops, 1)
        values = li.values
        slots = np.zeros((n, layout.SLOT_COUNT), dtype=np.int64)
        cs, ce, cv = (np.zeros((n, width), dtype=np.int64) for _ in range(3))
        cd = np.zeros((n, width), dtype=np.float64)
        sizes = np.zeros(n, dtype=np.int64)
        marks = np.empty(len(values), dtype=np.uint16)
        decoded = np.empty(len(values), dtype=np.uint8)
        before, after = self.row_args(li, marks, decoded, slots, (cs, ce, cv, cd))
        self.mark(values, marks, decoded, li.value_ends, self.max_bytes, n)
        if self.lane_order not in ORDERED_LANES:
            fns = compile_lane("cpu-warp", self.cache) if self.lane_order == "warp" else self.fns
            fns.measure(*before, *after, sizes)
            return _CpuPass(li, marks, decoded, slots, (cs, ce, cv, cd), sizes)
        classes, order = self.row_order(li.value_ends[:n])
        self.fns.measure_ordered(*before, *after, sizes, order)
        return _CpuPass(li, marks, decoded, slots, (cs, ce, cv, cd), sizes, classes, order)

    def row_args(
        self, li: LaneInput, marks: npt.NDArray[np.uint16], decoded: npt.NDArray[np.uint8], slots: I64,
        content: tuple[Any, ...],
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """Pass 1's arguments either side of ``rows.measure_row``'s row index; the kernels take both, then the sizes."""
        before = (li.values, marks, decoded, li.value_ends, *li.record_columns(), self.max_bytes, slots)
        return before, (*self.tables.args(), *content, li.partitions, li.offsets, li.timestamps)

    def sizes(self, handle: _CpuPass) -> I64:
        """Pass 1's sizes (already there)."""
        return handle.sizes

    def submit_write(
        self, handle: _CpuPass, starts: I64, offsets: I64, out: npt.NDArray[np.uint8], rows: I64 | None = None
    ) -> None:
        """Pass 2, run here and now, piece by piece (:attr:`write_piece_bytes`), each over its own rows.

        Each piece's launch is followed, with spans (:attr:`write_spans`), by the copy of its rows' spans.
        """
        li, t, n = handle.li, self.tables, len(starts)
        pieces = write_pieces(offsets, self.write_piece_bytes)
        bounds = piece_rows(pieces, offsets, rows, n)
        # A warp per row takes its piece's rows as they came: a row's length holds back no other row.
        order, classes = (None, None) if self.write_warp else (handle.order, handle.classes)
        if order is not None and classes is not None and bounds is not None and len(pieces) > 1:
            self.piece_order(classes, bounds, order)
        keys, _, _, headers, _ = li.record_columns()
        args = (handle.decoded, keys, headers, handle.slots, t.ptab, t.pnames, t.pends, t.nprops, *handle.content)
        args += (li.partitions, li.offsets, li.timestamps, starts)
        fns = compile_lane("cpu-warp", self.cache) if self.write_warp else self.fns
        # Each launch zeroes the span count of the rows it writes, and the copy reads only those rows.
        spans = np.empty((n, self.span_columns), dtype=np.int64)
        for k, (lo, hi) in enumerate(pieces):
            first, last = (0, n) if bounds is None else (int(bounds[k]), int(bounds[k + 1]))
            if order is None:
                fns.write(*args, first, last, lo, hi, out[lo:hi], spans)
            else:
                self.fns.write_ordered(*args, order, first, last, lo, hi, out[lo:hi], spans)
            if spans.shape[1] > 1:
                self.copy_spans(handle.decoded, spans, starts, first, last, lo, hi, out[lo:hi])

    def wait(self, handle: _CpuPass) -> None:
        """Nothing to wait for."""
