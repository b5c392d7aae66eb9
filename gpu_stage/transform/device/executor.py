"""Where the lane's two passes run: the :class:`Executor` interface, and the CPU one the tests use.

The CUDA executor is :class:`gpu_stage.transform.device.cuda.CudaExecutor`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.device import slots as layout
from gpu_stage.transform.device.columns import I64, LaneInput
from gpu_stage.transform.device.kernels import compile_lane
from gpu_stage.transform.device.merge import starts_of
from gpu_stage.transform.device.tables import ContentTables

log = logging.getLogger(__name__)


class Executor:
    """Runs the two passes somewhere, for one batch at a time in each of a few slots.

    The steps are split so a caller can overlap batches: :meth:`submit` starts pass 1 of a batch in
    a slot, :meth:`sizes` waits for its sizes, :meth:`submit_write` starts pass 2 into a host buffer,
    :meth:`wait` waits for that buffer. A slot's buffers are reused by the next batch in that slot.
    """

    SLOTS = 2

    def __init__(self) -> None:
        """No host buffers yet: they are allocated at first use and grow with the batches."""
        self._held: dict[str, npt.NDArray[Any]] = {}

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

    def submit_write(self, handle: Any, starts: I64, offsets: I64, out: npt.NDArray[np.uint8]) -> None:
        """Start pass 2: each taken row's datum at ``starts[r]`` (-1: skip) of ``out``.

        ``offsets`` are the output's row boundaries, ascending from 0 to its size (the rows the
        native core fills in included): an executor may write the output in pieces cut there.
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
        self.submit_write(handle, starts, offsets, out)
        self.wait(handle)
        return sizes, taken, offsets, out[:total]


@dataclass
class _CpuPass:
    """A batch between the passes on the CPU: its input, its values' copy and pass 1's per-row state."""

    li: LaneInput
    values: npt.NDArray[np.uint8]
    slots: I64
    content: tuple[Any, ...]
    sizes: I64


class CpuExecutor(Executor):
    """The lane compiled for the CPU: the same code as on the device, what the tests compare."""

    def __init__(self, tables: ContentTables, max_bytes: int, cache: Path | None = None) -> None:
        """Compile the lane with numba for this CPU (or load it from ``cache``)."""
        super().__init__()
        self.fns = compile_lane("cpu", cache)
        self.tables = tables
        self.max_bytes = max_bytes

    def submit(self, li: LaneInput, n: int, slot: int) -> _CpuPass:
        """Pass 1, run here and now, on a copy of the values.

        Pass 1 decodes strings in place, as it does in the device's copy: the host's values stay as
        they are for the native core.
        """
        t = self.tables
        width = max(t.nprops, 1)
        values = li.values.copy()
        slots = np.zeros((n, layout.SLOT_COUNT), dtype=np.int64)
        cs, ce, cv = (np.zeros((n, width), dtype=np.int64) for _ in range(3))
        cd = np.zeros((n, width), dtype=np.float64)
        sizes = np.zeros(n, dtype=np.int64)
        rows = (li.partitions, li.offsets, li.timestamps)
        self.fns.measure(
            values,
            li.value_ends,
            *li.record_columns(),
            self.max_bytes,
            slots,
            *t.args(),
            cs,
            ce,
            cv,
            cd,
            *rows,
            sizes,
        )
        return _CpuPass(li, values, slots, (cs, ce, cv, cd), sizes)

    def sizes(self, handle: _CpuPass) -> I64:
        """Pass 1's sizes (already there)."""
        return handle.sizes

    def submit_write(self, handle: _CpuPass, starts: I64, offsets: I64, out: npt.NDArray[np.uint8]) -> None:
        """Pass 2, run here and now, in one piece."""
        li, t = handle.li, self.tables
        total = int(offsets[-1])
        target = out if total else np.zeros(1, dtype=np.uint8)
        rows = (li.partitions, li.offsets, li.timestamps)
        keys, _, _, headers, _ = li.record_columns()
        self.fns.write(
            handle.values, keys, headers, handle.slots, t.ptab, t.pnames, t.pends, t.nprops, *handle.content,
            *rows, starts, 0, total, target,
        )  # fmt: skip

    def wait(self, handle: _CpuPass) -> None:
        """Nothing to wait for."""
