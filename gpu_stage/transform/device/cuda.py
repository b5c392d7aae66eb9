"""The device lane on CUDA: device buffers kept between batches, pass 1 and pass 2 launched per batch.

Per batch: the packed values, keys and headers, their ends and the record columns go to the device
(one copy, from page-locked memory); ``mark`` (a warp per body) marks and decodes each body's
strings into buffers of their own, then ``measure`` (a thread per body) walks each body and writes its
row's size; the sizes come back (8 bytes per row) for the prefix sum; ``write`` fills the output,
by default in one piece (or in pieces through two device buffers in turn, each piece copied back
into one host buffer on a stream of its own while the next piece is written), a thread a row that
leaves its long strings to spans, which ``copy_spans`` then copies a warp a row. Each slot (a batch in
flight) has its own CUDA stream and buffers, so one batch's copies and kernels run while another's
do and while the host finishes a third.
Buffers grow to the largest batch seen (byte buffers with a little headroom) and are reused, so a
steady stream of batches allocates nothing. Importing this module needs numba-cuda (it ships with
cuDF); nothing runs until :class:`CudaExecutor` is built.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.api import DEALT_LANES, ORDERED_LANES
from gpu_stage.transform.device import slots
from gpu_stage.transform.device.columns import I64, RECORD_COLUMNS, LaneInput
from gpu_stage.transform.device.executor import Executor, piece_rows, wait_for, write_pieces
from gpu_stage.transform.device.kernels import compile_lane
from gpu_stage.transform.device.launch import DirectLaunch, kernel_resources
from gpu_stage.transform.device.memory import OUTPUTS
from gpu_stage.transform.device.order import CLASSES, WARP, WHOLE_BATCH
from gpu_stage.transform.device.tables import ContentTables
from gpu_stage.transform.stages import StageClock
from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)

THREADS = 128
"""Threads per block of each pass's launches (:attr:`CudaExecutor.measure_threads`, ``write_threads``)."""
MARK_THREADS = 256
"""Threads per block of the strings pass (a warp a row, few registers: many warps resident hide its loads)."""
SPAN_THREADS = 256
"""Threads per block of the copy of pass 2's spans (a warp a row, few registers, as the strings pass)."""
PASS_KERNELS = ("measure", "write", "measure_ordered", "write_ordered")
"""Each pass's kernel with the rows as they came, and with thread ``t`` on row ``order[t]`` (``length``)."""
ORDER_KERNELS = ("length_classes", "count_classes", "class_starts", "place_rows", "deal_rows")
"""The kernels that make the rows' order with ``length`` (:mod:`gpu_stage.transform.device.order`),
launched with :data:`THREADS` threads per block: three per batch for pass 1, and three more for
pass 2 where its output comes in several pieces; ``balanced`` adds ``deal_rows`` to each three.
``arrival`` launches none."""
_MAX_VIEWS = 256
WRITE_PIECE_BYTES = 0
"""Pass 2's largest output piece; 0: a batch's output in one piece, one launch. A piece's launch has
a thread for each of its rows only, and on real-shaped bodies a 12 MiB piece holds about 12 k rows:
too few to fill the device, so the pieces' launches, one after another, made pass 2 of a 100 k batch
take about 27 ms of device time beside the next batch's pass 1, and one piece about 11 ms (H100
timeline). In one piece the device holds two of a batch's outputs (:data:`OUT_BUFFERS`) rather than
two pieces: about the batch's bytes again, against the five times them each slot holds."""
OUT_BUFFERS = OUTPUTS  # the memory estimate counts the same buffers
"""Pass 2's pieces take turns in this many device buffers: a piece's copy out runs on the copy
stream while the next piece is written on the slot's stream, so the device's copy engine and its
cores work at once where, with one buffer, each piece's kernel waited for the copy before it
(pass 2 of a 100 k batch 6.5 -> 5.4 ms, of which 5.2 ms are now its kernels)."""
WRITE_STREAMS = 1
"""Streams pass 2's pieces are written on: 1, the slot's own (one piece at a time); :data:`OUT_BUFFERS`,
one per output buffer, so that two pieces are written at once (each piece's kernel is latency-bound:
a 12 MiB piece keeps about three warps per SM busy)."""
PIECES_AT_LEAST = 6
"""With pieces (:attr:`CudaExecutor.write_piece_bytes` > 0), a smaller output is cut into about this
many pieces (none under :data:`MIN_PIECE_BYTES`): the
device's :data:`OUT_BUFFERS` then hold a third of it, not all of it; at 10 k 1 KB rows a batch's
output is about as large as its input, so one piece would hold a batch's worth of device memory on
its own. Six keep a 10 k batch at 3.98x its bytes on the device (four: 4.14x)."""
MIN_PIECE_BYTES = 1 << 20
HEADROOM_PARTS = 64
"""A byte buffer (a slot's block or values, the output piece) is allocated 1/64 larger than asked.
Batches' byte sizes vary a little around their mean (a 100 k batch of ~1 KB bodies by well under 1%,
an output piece by up to a row), so a buffer sized exactly grows again at each new largest batch, and
growing waits for everything queued that may read it: a stall of the feeding thread of up to a batch's
device time. Row buffers are sized by a batch's row count, which repeats, and get none."""


def piece_bytes(total: int, largest: int) -> int:
    """Pass 2's piece for an output of ``total`` bytes: a sixth of it, within [1 MiB, ``largest``].

    ``largest`` 0 means the whole output in one piece (as :func:`write_pieces` takes it).
    """
    if largest <= 0:
        return 0
    return min(largest, max(MIN_PIECE_BYTES, -(-total // PIECES_AT_LEAST)))


def capacity(rows: int, dtype: Any, width: int = 0, parts: int = HEADROOM_PARTS) -> int:
    """Items to allocate for a grow-only device buffer asked for ``rows`` items.

    A byte buffer gets a ``parts``-th more (:data:`HEADROOM_PARTS`; 0: none).
    """
    byte_buffer = width == 0 and np.dtype(dtype).itemsize == 1
    headroom = rows // parts if byte_buffer and parts > 0 else 0
    return max(rows + headroom, 1024)


def blocking_event(cuda: Any) -> Any:
    """A numba-cuda event made with ``CU_EVENT_BLOCKING_SYNC``: its ``synchronize`` sleeps instead of spinning.

    numba-cuda makes its events without that flag, so the driver call and the event's finalizer
    are numba-cuda's own, as its ``Context.create_event`` uses them.
    """
    driver = cuda.cudadrv.driver
    flags = driver.binding.CUevent_flags
    handle = driver.driver.cuEventCreate(int(flags.CU_EVENT_DISABLE_TIMING) | int(flags.CU_EVENT_BLOCKING_SYNC))
    deallocations = cuda.current_context().deallocations
    return driver.Event(handle, finalizer=driver._event_finalizer(deallocations, handle))


@dataclass
class _Slot:
    """A slot: its stream, on which its batches' copies and passes run in order."""

    index: int
    stream: Any


@dataclass
class _Pass:
    """One batch on the device, between its passes: its slot's stream, its device arrays and events.

    ``sized`` completes when pass 1's sizes are in their host buffer, ``done`` when pass 2's last
    piece is in the batch's output buffer (None while pass 2 is not queued, or has nothing to write).
    """

    index: int
    stream: Any
    n: int
    arrays: dict[str, Any]
    sizes: npt.NDArray[np.int64]
    sized: Any
    done: Any = None


class CudaExecutor(Executor):
    """Both passes on the current CUDA device; each slot has a stream and device buffers of its own."""

    def __init__(
        self, tables: ContentTables, max_bytes: int, cache: Path | None = None, registers: int = 0,
        clock: StageClock | None = None,
    ) -> None:  # fmt: skip
        """Compile the lane for CUDA and upload the schema tables.

        Kernels compile on their first launch, or load from ``cache`` when an earlier run compiled them.
        ``registers`` caps pass 1's registers per thread (``TransformSettings.lane_registers``; 0: the
        compiler's choice): every kernel comes from that one build of the lane, whose other kernels
        are those of the uncapped build.
        """
        from numba import cuda

        super().__init__()
        self._cuda: Any = cuda
        self.fns = compile_lane("cuda", cache, registers)
        self._cache = cache
        self._warp_kernels: dict[str, DirectLaunch] = {}
        warps = compile_lane("cuda-warp", cache)
        self.mark = DirectLaunch(warps.mark)
        self.copy_spans = DirectLaunch(warps.copy_spans)
        self.measure = DirectLaunch(self.fns.measure)
        self.write = DirectLaunch(self.fns.write)
        self.measure_ordered = DirectLaunch(self.fns.measure_ordered)
        self.write_ordered = DirectLaunch(self.fns.write_ordered)
        self._ordering = {name: DirectLaunch(getattr(self.fns, name)) for name in ORDER_KERNELS}
        self._whole = cuda.to_device(np.array(WHOLE_BATCH, dtype=np.int64))
        self.max_bytes = max_bytes
        self.nprops = tables.nprops
        self.clock = clock or StageClock()
        self._tables = tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in tables.args())
        self._arrays: dict[str, Any] = {}
        self._views: dict[tuple[str, int], Any] = {}
        # Each slot's block's column views, by (slot prefix, column): (block, place, view).
        self._block_columns: dict[tuple[str, str], tuple[Any, tuple[Any, ...], Any]] = {}
        self._slots: dict[int, _Slot] = {}
        # Pass 2's copies out, in queueing order, and per output buffer: its piece written / copied out.
        self._copies: Any = None
        driver = getattr(getattr(cuda, "cudadrv", None), "driver", None)
        self._to_host: Any = getattr(driver, "device_to_host", None)
        self._to_device: Any = getattr(driver, "host_to_device", None)
        self._written: list[Any] = []
        self._freed: list[Any] = []
        # With pass 2 on streams of its own: those streams, and the events that join them to a slot's.
        self._writers: list[Any] = []
        self._joins: list[Any] = []
        self.write_piece_bytes = WRITE_PIECE_BYTES
        self.write_streams = WRITE_STREAMS
        self.headroom_parts = HEADROOM_PARTS
        self.measure_threads = THREADS
        self.write_threads = THREADS
        self._register_caps: dict[str, int | None] = dict.fromkeys(PASS_KERNELS)
        self._register_caps["measure"] = self._register_caps["measure_ordered"] = registers or None

    @property
    def measure_registers(self) -> int | None:
        """Pass 1's kernels' register cap per thread (None: the compiler's choice).

        A thread's registers bound the warps an SM keeps resident, and those hide the walk's memory
        waits; a cap raises residency at the price of spills to local memory, so it is measured, not
        assumed (``TransformSettings.lane_registers``). The capped kernels come from a build of the
        lane with that cap (:func:`compile_lane`), cached like the default one; the ``warp`` order's
        kernel is compiled anew with it (see :meth:`_capped`).
        """
        return self._register_caps["measure"]

    @measure_registers.setter
    def measure_registers(self, cap: int | None) -> None:
        cap = cap or None  # 0 is the compiler's choice, as in the settings
        if cap == self._register_caps["measure"]:
            return  # already built with it
        self._register_caps["measure"] = self._register_caps["measure_ordered"] = cap
        built = compile_lane("cuda", self._cache, cap or 0)
        self.measure = DirectLaunch(built.measure)
        self.measure_ordered = DirectLaunch(built.measure_ordered)
        self._warp_kernels.pop("measure", None)  # made anew, with the cap, at its next launch

    @property
    def write_registers(self) -> int | None:
        """Pass 2's kernel's register cap per thread (None: the compiler's choice); see :meth:`_capped`."""
        return self._register_caps["write"]

    @write_registers.setter
    def write_registers(self, cap: int | None) -> None:
        self.write = self._capped("write", cap)
        self.write_ordered = self._capped("write_ordered", cap)
        self._warp_kernels.pop("write", None)

    def _capped(self, name: str, cap: int | None) -> DirectLaunch:
        """Pass ``name``'s launch, its kernel compiled anew with at most ``cap`` registers per thread.

        A thread's registers bound the warps an SM keeps resident, and those hide the walk's memory
        waits; a cap raises residency at the price of spills to local memory, so it is measured, not
        assumed. A capped kernel is compiled on its first launch and not cached (a benchmark's knob).
        """
        self._register_caps[name] = cap
        kernel = getattr(self.fns, name)
        if cap is not None:
            kernel = self._cuda.jit(max_registers=cap)(kernel.py_func)
        return DirectLaunch(kernel)

    def kernel_resources(self) -> dict[str, dict[str, int | None]]:
        """Each pass's kernel, once launched: registers and memory per thread, blocks resident per SM.

        A pass's warp-per-row kernel (``lane_order`` warp, :attr:`write_warp`) is named ``<pass>_warp``.
        """
        threads = {"measure": self.measure_threads, "write": self.write_threads}
        found = {name: kernel_resources(getattr(self, name), threads[name.split("_")[0]]) for name in PASS_KERNELS}
        warps = self._warp_kernels.items()
        found |= {f"{name}_warp": kernel_resources(launch, threads[name]) for name, launch in warps}
        return {name: report for name, report in found.items() if report is not None}

    def _allocate_host(self, size: int, dtype: Any = np.uint8) -> npt.NDArray[Any]:
        """Page-locked host memory: the device copies from it at full speed, with no staging copy."""
        pinned: npt.NDArray[Any] = self._cuda.pinned_array(max(size, 1), dtype=dtype)
        return pinned

    def device_bytes(self) -> int:
        """Bytes of device memory the lane holds (its buffers are sized by the largest batch so far)."""
        return sum(int(a.nbytes) for a in self._arrays.values()) + sum(
            int(a.nbytes) for a in self._tables if hasattr(a, "nbytes")
        )

    def _device(self, name: str, rows: int, dtype: Any, width: int = 0) -> Any:
        """A device array of ``rows`` rows from a grow-only buffer kept under ``name``.

        The view is kept too: batches of one size (the common case) reuse it, and making a device
        array view is Python work on the thread that feeds the device.
        """
        view = self._views.get((name, rows))
        if view is not None:
            return view
        held = self._buffer(name, rows, dtype, width)
        view = self._views[(name, rows)] = held[:rows]
        if len(self._views) > _MAX_VIEWS:  # batches of many sizes: keep the newest views only
            self._views = dict(list(self._views.items())[-_MAX_VIEWS // 2 :])
        return view

    def _buffer(self, name: str, rows: int, dtype: Any, width: int = 0) -> Any:
        """The grow-only buffer kept under ``name``, whole, at least ``rows`` rows.

        A byte buffer goes to the kernels whole: they read it by its ends, so one object serves
        batches of every size, its launch parameters converted once.
        """
        held = self._arrays.get(name)
        if held is None or held.shape[0] < rows:
            if held is not None:
                with self.clock.stage("lane_wait_growth"):  # part of the queueing stage it happens in
                    self._quiesce(name)
            # Free the smaller buffer first: the pool (capped, shared with vLLM) never holds both.
            self._arrays.pop(name, None)
            self._views = {key: v for key, v in self._views.items() if key[0] != name}
            self._forget_columns({name})
            del held
            items = capacity(rows, dtype, width, self.headroom_parts)
            held = self._cuda.device_array((items, width) if width else (items,), dtype=dtype)
            self._arrays[name] = held
        return held

    def _quiesce(self, name: str) -> None:
        """Wait for the work queued that may use the buffer ``name``, before it is freed.

        A slot's next batch is queued behind its earlier one's pass 2, so a slot buffer that must
        grow may still be read; the output buffers are every slot's, and the copy stream reads them.
        Rare: buffers only grow.
        """
        slot, dot, _ = name.partition(".")
        own = dot and slot.isdigit() and int(slot) in self._slots
        for owner in [self._slots[int(slot)]] if own else list(self._slots.values()):
            owner.stream.synchronize()
        if not own:
            for other in [s for s in (self._copies, *self._writers) if s is not None]:
                other.synchronize()

    def _drop(self, names: list[str]) -> None:
        """Free the device buffers kept under ``names`` (and their views), once nothing queued reads them.

        Only for a slot's own buffers as its next batch starts (a slot keeps one way's buffers).
        """
        gone = {name for name in names if name in self._arrays}
        if not gone:
            return
        self._quiesce(next(iter(gone)))  # one slot's buffers: one stream to wait for
        for name in gone:
            del self._arrays[name]
        self._views = {key: view for key, view in self._views.items() if key[0] not in gone}
        self._forget_columns(gone)

    def _forget_columns(self, names: set[str]) -> None:
        """Let go of the column views of the blocks in ``names`` (views keep their buffer alive)."""
        self._block_columns = {key: v for key, v in self._block_columns.items() if key[0] + "block" not in names}

    def _pinned(self, name: str, host: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """``host`` copied into the page-locked buffer kept under ``name`` (so its copy is async)."""
        view = self._host(name, len(host), host.dtype)[: len(host)]
        view[:] = host
        return view

    def _put(self, name: str, host: npt.NDArray[Any], stream: Any, pinned: bool = False) -> Any:
        """Copy a 1-D host array into the device buffer ``name`` on ``stream`` (a byte buffer: whole)."""
        byte = host.dtype == np.uint8
        device = self._buffer(name, len(host), host.dtype) if byte else self._device(name, len(host), host.dtype)
        source = host if pinned else self._pinned(name, np.ascontiguousarray(host))
        self._copy_in(device, source, stream)
        return device

    def _copy_in(self, device: Any, host: npt.NDArray[Any], stream: Any) -> None:
        """``host`` (page-locked) into the first ``host.nbytes`` bytes of ``device``, queued on ``stream``.

        Straight through the driver's copy where numba has it, as :meth:`_copy_out`.
        """
        if not host.nbytes:
            return
        if self._to_device is None:
            device[: len(host)].copy_to_device(host, stream=stream)
        else:
            self._to_device(device, host, host.nbytes, stream=stream)

    def _put_block(self, k: str, li: LaneInput, stream: Any) -> dict[str, Any] | None:
        """The whole batch in one copy, when it lies in one page-locked block; each column a view of it.

        One copy instead of ten, and none into a staging buffer first: each copy call costs the
        thread that feeds the device tens of microseconds.
        """
        layout = li.block_layout()
        if layout is None or li.block is None:
            return None
        span, columns = layout
        self._drop([k + name for name in columns])  # a slot holds one way's buffers, never both
        device = self._buffer(k + "block", span, np.uint8)
        self._copy_in(device, li.block[:span], stream)
        return self._columns_of(k, device, columns)

    def _columns_of(self, k: str, device: Any, columns: dict[str, tuple[int, npt.NDArray[Any]]]) -> dict[str, Any]:
        """The columns' views of a slot's block, each the same object while its place in the block stays.

        A byte column's view runs to the block's end (the kernels read it by its ends), so it is kept
        while its start stays; another column's while its start and length stay. Kept views keep
        their converted launch parameters (:class:`DirectLaunch`) too.
        """
        views: dict[str, Any] = {}
        for name, (at, column) in columns.items():
            byte = column.dtype == np.uint8
            place = (at, 0 if byte else column.nbytes, column.dtype.str)
            held = self._block_columns.get((k, name))
            if held is None or held[0] is not device or held[1] != place:
                view = device[at:] if byte else device[at : at + column.nbytes].view(column.dtype)
                held = self._block_columns[(k, name)] = (device, place, view)
            views[name] = held[2]
        return views

    def _put_each(self, k: str, li: LaneInput, stream: Any) -> dict[str, Any]:
        """The values and each column in a copy of its own (staged first unless page-locked)."""
        self._drop([k + "block"])
        cols = {"values": self._put(k + "values", li.values, stream, pinned=True)}
        for name, col in li.columns().items():
            cols[name] = self._put(k + name, col, stream, pinned=name in li.pinned)
        return cols

    def _slot(self, slot: int) -> _Slot:
        held = self._slots.get(slot)
        if held is None:
            held = self._slots[slot] = _Slot(slot, self._cuda.stream())
        return held

    def submit(self, li: LaneInput, n: int, slot: int) -> _Pass:
        """Queue the copies in, pass 1 and the sizes' copy back on the slot's stream.

        ``li.values`` is page-locked, and so are the columns ``li.pinned`` names: they go to the
        device from where they are. The others are copied into page-locked buffers first. The
        slot's earlier batch may still have pass 2 queued: the stream runs this batch's copies after
        it, so they overwrite nothing it reads.
        """
        stream, k = self._slot(slot).stream, f"{slot}."
        cols = self._put_block(k, li, stream) or self._put_each(k, li, stream)
        values = cols["values"]
        a = {
            "values": values,
            "record": tuple(cols[name] for name in RECORD_COLUMNS),
            "records": (cols["partitions"], cols["offsets"], cols["timestamps"]),
        }
        value_ends = cols["value_ends"]
        width = max(self.nprops, 1)
        a["slots"] = self._device(k + "slots", n, np.int64, slots.SLOT_COUNT)
        ints = (self._device(k + c, n, np.int64, width) for c in ("cs", "ce", "cv"))
        a["content"] = (*ints, self._device(k + "cd", n, np.float64, width))
        sizes = self._device(k + "sizes", n, np.int64)
        threads = self.measure_threads
        marks = self._buffer(k + "marks", values.shape[0], np.uint16)
        a["decoded"] = self._buffer(k + "decoded", values.shape[0], np.uint8)
        args = (values, marks, a["decoded"], value_ends, *a["record"], self.max_bytes, a["slots"], *self._tables)
        args += a["content"]
        args += a["records"]
        marking = (values, marks, a["decoded"], value_ends, self.max_bytes)
        self.mark(-(-n * WARP // MARK_THREADS), MARK_THREADS, stream, *marking, n)
        if self.lane_order == "warp":
            a["order"] = a["classes"] = None
            self._warp_kernel("measure", threads)(-(-n * WARP // threads), threads, stream, *args, sizes)
        elif self.lane_order not in ORDERED_LANES:
            a["order"] = a["classes"] = None
            self.measure(-(-n // threads), threads, stream, *args, sizes)
        else:
            a["order"], a["classes"] = self._row_order(k, n, value_ends, stream)
            self.measure_ordered(-(-n // threads), threads, stream, *args, sizes, a["order"])
        host_sizes = self._host(k + "sizes", n, np.int64)
        sizes.copy_to_host(host_sizes[:n], stream=stream)
        sized = self._host_event()
        sized.record(stream)
        return _Pass(slot, stream, n, a, host_sizes, sized)

    def _warp_kernel(self, name: str, threads: int) -> DirectLaunch:
        """Pass ``name`` with a warp per row (the ``cuda-warp`` build's, compiled at its first use).

        Capped at the pass's register cap (:attr:`measure_registers`, :attr:`write_registers`) when set.
        """
        if threads % WARP:  # a warp's ballots need all its 32 threads
            msg = f"threads per block must be a multiple of {WARP} for a warp per row, not {threads}"
            raise ConfigError(msg)
        if name not in self._warp_kernels:
            kernel = getattr(compile_lane("cuda-warp", self._cache), name)
            cap = self._register_caps[name]
            if cap is not None:
                kernel = self._cuda.jit(max_registers=cap)(kernel.py_func)
            self._warp_kernels[name] = DirectLaunch(kernel)
        return self._warp_kernels[name]

    def _row_order(self, k: str, n: int, value_ends: Any, stream: Any) -> tuple[Any, Any]:
        """Queue the making of the order pass 1's threads take the rows in (``length``, ``balanced``).

        Each row's length class, then the rows sorted by it (and dealt, with ``balanced``); the classes
        are kept for pass 2.
        """
        order = self._device(k + "order", n, np.int64)
        blocks = -(-n // THREADS)
        classes = self._device(k + "classes", n, np.uint8)
        counts, cursors = self._class_counts(k, 1, stream)
        self._ordering["length_classes"](blocks, THREADS, stream, value_ends, classes, counts)
        self._ordering["class_starts"](1, THREADS, stream, self._whole, counts, cursors)
        self._sort_rows(k, n, classes, self._whole, cursors, order, stream)
        return order, classes

    def _sort_rows(self, k: str, n: int, classes: Any, bounds: Any, cursors: Any, order: Any, stream: Any) -> None:
        """Each segment's rows into ``order`` by class; with ``balanced`` sorted apart, then dealt into ``order``."""
        blocks = -(-n // THREADS)
        dealt = self.lane_order in DEALT_LANES
        target = self._device(k + "sorted", n, np.int64) if dealt else order
        self._ordering["place_rows"](blocks, THREADS, stream, classes, bounds, cursors, target)
        if dealt:
            self._ordering["deal_rows"](blocks, THREADS, stream, target, bounds, order)

    def _piece_order(self, handle: _Pass, bounds: I64) -> None:
        """Queue the making of pass 2's order: each piece's rows (``bounds``) in their own span, by length class.

        Rewrites the slot's order in place: pass 1, which read it, is queued before on the same stream.
        """
        a, stream, k, n = handle.arrays, handle.stream, f"{handle.index}.", handle.n
        segments = len(bounds) - 1
        device_bounds = self._put(k + "bounds", bounds, stream)
        counts, cursors = self._class_counts(k, segments, stream)
        blocks = -(-n // THREADS)
        self._ordering["count_classes"](blocks, THREADS, stream, a["classes"], device_bounds, counts)
        self._ordering["class_starts"](-(-segments // THREADS), THREADS, stream, device_bounds, counts, cursors)
        self._sort_rows(k, n, a["classes"], device_bounds, cursors, a["order"], stream)

    def _class_counts(self, k: str, segments: int, stream: Any) -> tuple[Any, Any]:
        """The slot's class counts and cursors for ``segments`` segments (whole buffers: launch parameters kept).

        The counts are zeroed once, when allocated: :func:`class_starts` leaves them 0 after each use.
        """
        name = k + "counts"
        held = self._arrays.get(name)
        counts = self._buffer(name, segments * CLASSES, np.int32)
        if counts is not held:
            counts.copy_to_device(np.zeros(counts.shape[0], dtype=np.int32), stream=stream)
        return counts, self._buffer(k + "cursors", segments * CLASSES, np.int32)

    def sizes(self, handle: _Pass) -> I64:
        """Wait for the batch's pass 1; a copy of its sizes (the page-locked buffer is the slot's)."""
        wait_for(handle.sized, self.device_wait)
        return np.array(handle.sizes[: handle.n])

    def submit_write(
        self, handle: _Pass, starts: I64, offsets: I64, out: npt.NDArray[np.uint8], rows: I64 | None = None
    ) -> None:
        """Queue pass 2 on the slot's stream and the copies of its output into ``out`` (page-locked).

        The output goes through :data:`OUT_BUFFERS` device buffers in pieces of about
        :func:`piece_bytes` (at most :attr:`write_piece_bytes`), each written by a launch of pass 2
        for the rows that start in it, then copied out on the copy stream while the next piece is
        written into the other buffer: the device holds two pieces, not a whole batch's output (as
        large as its values). A piece's launch waits, on the device, for the copy out of the piece
        its buffer held before (the batch before's, on another slot, too); the host does not wait.
        With ``rows``, a piece's launch has a thread for each of its own rows only (:func:`piece_rows`),
        and with ``length`` those rows are sorted by length class within the piece first.
        """
        pieces = write_pieces(offsets, piece_bytes(int(offsets[-1]), self.write_piece_bytes))
        if not pieces:
            return
        a, stream, n = handle.arrays, handle.stream, handle.n
        device_starts = self._put(f"{handle.index}.starts", starts, stream)
        bounds = piece_rows(pieces, offsets, rows, n)
        order = None if self.write_warp else a["order"]  # a warp per row: the rows as they came
        if bounds is not None and len(pieces) > 1 and order is not None:
            self._piece_order(handle, bounds)
        firsts = [0] * len(pieces) if bounds is None else bounds[:-1].tolist()
        lasts = [n] * len(pieces) if bounds is None else bounds[1:].tolist()
        largest = max(hi - lo for lo, hi in pieces)
        buffers = [self._buffer(f"out.{b}", largest, np.uint8) for b in range(min(OUT_BUFFERS, len(pieces)))]
        copies = self._copy_stream()
        writers = self._writers_after(stream, len(buffers))
        threads = self.write_threads
        args = (a["decoded"], a["record"][0], a["record"][3], a["slots"], *self._tables[:3], self.nprops, *a["content"])
        args += (*a["records"], device_starts)
        columns = self.span_columns
        spans = self._device(f"{handle.index}.spans{columns}", n, np.int64, columns)
        for at, (lo, hi) in enumerate(pieces):
            b = at % len(buffers)
            writer = writers[b % len(writers)]
            self._freed[b].wait(writer)
            first, last = firsts[at], lasts[at]
            blocks = -(-(last - first) // threads)
            if self.write_warp:
                launch = self._warp_kernel("write", threads)
                launch(blocks * WARP, threads, writer, *args, first, last, lo, hi, buffers[b], spans)
            elif order is None:
                self.write(blocks, threads, writer, *args, first, last, lo, hi, buffers[b], spans)
            else:
                self.write_ordered(blocks, threads, writer, *args, order, first, last, lo, hi, buffers[b], spans)
            if columns > 1:
                copying = (a["decoded"], spans, device_starts, first, last, lo, hi, buffers[b])
                self.copy_spans(-(-(last - first) * WARP // SPAN_THREADS), SPAN_THREADS, writer, *copying)
            self._written[b].record(writer)
            self._written[b].wait(copies)
            self._copy_out(buffers[b], out[lo:hi], copies)
            self._freed[b].record(copies)
        self._join(writers, stream)
        handle.done = self._host_event()
        handle.done.record(copies)

    def _host_event(self) -> Any:
        """An event the feeding thread waits on (:func:`wait_for`): for blocking waits with ``block``."""
        if self.device_wait == "block":
            return blocking_event(self._cuda)
        return self._cuda.event(timing=False)

    def _writers_after(self, stream: Any, buffers: int) -> list[Any]:
        """The streams pass 2 writes on, each queued behind ``stream``'s work so far (pass 1, the starts).

        Just ``stream`` unless :attr:`write_streams` asks for more: then one per output buffer in use.
        """
        if self.write_streams <= 1 or buffers <= 1:
            return [stream]
        while len(self._writers) < OUT_BUFFERS:
            self._writers.append(self._cuda.stream())
            self._joins.append(self._cuda.event(timing=False))
        ready = self._joins[0]
        ready.record(stream)
        writers = self._writers[:buffers]
        for writer in writers:
            ready.wait(writer)
        return writers

    def _join(self, writers: list[Any], stream: Any) -> None:
        """Queue ``stream``'s next work behind pass 2 on ``writers``: the slot's next batch overwrites what it reads."""
        if writers == [stream]:
            return
        for writer, joined in zip(writers, self._joins, strict=False):
            joined.record(writer)
            joined.wait(stream)

    def _copy_out(self, device: Any, host: npt.NDArray[np.uint8], stream: Any) -> None:
        """The first ``len(host)`` bytes of ``device`` into ``host`` (page-locked), queued on ``stream``.

        Straight through the driver's copy where numba has it: a device array view and its checks
        cost the feeding thread tens of microseconds per piece.
        """
        if self._to_host is None:
            device[: len(host)].copy_to_host(host, stream=stream)
        else:
            self._to_host(host, device, host.nbytes, stream=stream)

    def _copy_stream(self) -> Any:
        """The stream of pass 2's copies out (made with its events on first use)."""
        if self._copies is None:
            self._copies = self._cuda.stream()
            self._written = [self._cuda.event(timing=False) for _ in range(OUT_BUFFERS)]
            self._freed = [self._cuda.event(timing=False) for _ in range(OUT_BUFFERS)]
        return self._copies

    def wait(self, handle: _Pass) -> None:
        """Wait until the batch's output is in its host buffer (pass 1's sizes when it had none)."""
        wait_for(handle.done or handle.sized, self.device_wait)
