"""The device lane on CUDA: device buffers kept between batches, two kernel launches per batch.

Per batch: the packed values, their ends, the record segments and the record columns go to the
device (one copy each); ``measure`` (one thread per body) writes each row's size; the sizes come
back (8 bytes per row) for the prefix sum; ``write`` fills one output buffer, which comes back in
one copy. Buffers grow to the largest batch seen and are reused, so a steady stream of batches
allocates nothing. Importing this module needs numba-cuda (it ships with cuDF); nothing runs until
:class:`CudaExecutor` is built.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu_stage.backends import lane_rows
from gpu_stage.backends.lane import I64, ContentTables, Executor, LaneInput, compile_lane, starts_of
from gpu_stage.backends.stages import StageClock

log = logging.getLogger(__name__)

THREADS = 128


class CudaExecutor(Executor):
    """Both passes on the current CUDA device."""

    def __init__(
        self, tables: ContentTables, max_bytes: int, cache: Path | None = None, clock: StageClock | None = None
    ) -> None:
        """Compile the lane for CUDA and upload the schema tables.

        Kernels compile on their first launch, or load from ``cache`` when an earlier run compiled them.
        """
        from numba import cuda

        self._cuda = cuda
        self.fns = compile_lane("cuda", cache)
        self.max_bytes = max_bytes
        self.nprops = tables.nprops
        self.clock = clock or StageClock()
        self._tables = tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in tables.args())
        self._arrays: dict[str, Any] = {}
        self._arrays_host: dict[str, npt.NDArray[np.uint8]] = {}

    def _allocate_host(self, size: int) -> npt.NDArray[np.uint8]:
        """Page-locked host memory: the device copies from it at full speed, with no staging copy."""
        pinned: npt.NDArray[np.uint8] = self._cuda.pinned_array(max(size, 1), dtype=np.uint8)
        return pinned

    def _host_out(self, size: int) -> npt.NDArray[np.uint8]:
        """The page-locked buffer the encoded rows come back into (grow-only)."""
        held = self._arrays_host.get("out")
        if held is None or len(held) < size:
            held = self._allocate_host(max(size, int(len(held) * 1.5) if held is not None else 0))
            self._arrays_host["out"] = held
        return held

    def device_bytes(self) -> int:
        """Bytes of device memory the lane holds (its buffers are sized by the largest batch so far)."""
        return sum(int(a.nbytes) for a in self._arrays.values()) + sum(
            int(a.nbytes) for a in self._tables if hasattr(a, "nbytes")
        )

    def _device(self, name: str, rows: int, dtype: Any, width: int = 0) -> Any:
        """A device array of ``rows`` rows from a grow-only buffer kept under ``name``."""
        held = self._arrays.get(name)
        if held is None or held.shape[0] < rows:
            # Free the smaller buffer first: the pool (capped, shared with vLLM) never holds both.
            self._arrays.pop(name, None)
            del held
            capacity = max(rows, 1024)
            held = self._cuda.device_array((capacity, width) if width else (capacity,), dtype=dtype)
            self._arrays[name] = held
        return held[:rows]

    def _put(self, name: str, host: npt.NDArray[Any]) -> Any:
        """Copy a 1-D host array into the device buffer ``name``."""
        device = self._device(name, len(host), host.dtype)
        device.copy_to_device(np.ascontiguousarray(host))
        return device

    def encode(self, li: LaneInput, n: int) -> tuple[I64, I64, I64, Any]:
        """Run both passes; see the module docstring."""
        clock = self.clock
        with clock.stage("lane_copy_in"):
            values = self._put("values", li.values)
            value_ends = self._put("value_ends", li.value_ends)
            meta = self._put("meta", li.meta if len(li.meta) else np.zeros(1, dtype=np.uint8))
            meta_ends = self._put("meta_ends", li.meta_ends)
            columns = (li.partitions, li.offsets, li.timestamps)
            records = tuple(self._put(name, a) for name, a in zip(("p", "o", "t"), columns, strict=True))
        width = max(self.nprops, 1)
        scratch = self._device("scratch", len(li.values), np.uint8)
        slots = self._device("slots", n, np.int64, lane_rows.SLOT_COUNT)
        cs, ce, cv = (self._device(name, n, np.int64, width) for name in ("cs", "ce", "cv"))
        cd = self._device("cd", n, np.float64, width)
        sizes = self._device("sizes", n, np.int64)
        blocks = (n + THREADS - 1) // THREADS
        with clock.stage("lane_measure"):
            self.fns.measure[blocks, THREADS](
                values,
                value_ends,
                meta,
                meta_ends,
                self.max_bytes,
                scratch,
                slots,
                *self._tables,
                cs,
                ce,
                cv,
                cd,
                *records,
                sizes,
            )
            host_sizes = sizes.copy_to_host()
        with clock.stage("lane_offsets"):
            starts, taken, offsets = starts_of(host_sizes)
            device_starts = self._put("starts", starts)
        total = int(offsets[-1])
        out = self._device("out", max(total, 1), np.uint8)
        with clock.stage("lane_write"):
            self.fns.write[blocks, THREADS](
                values,
                meta,
                meta_ends,
                scratch,
                slots,
                self._tables[0],
                self.nprops,
                cs,
                ce,
                cv,
                cd,
                *records,
                device_starts,
                out,
            )
        with clock.stage("lane_copy_out"):
            host = self._host_out(total)[:total]
            if total:
                out[:total].copy_to_host(host)
        return host_sizes, taken, offsets, host
