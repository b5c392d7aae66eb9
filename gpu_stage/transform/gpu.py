"""The GPU backend: the device lane by default, or cuDF's reader path (``gpu-cudf``).

The device lane (:mod:`gpu_stage.transform.device`) walks each body in one CUDA thread and writes
the Avro datums on the device, with the native core for the bodies it does not take. This module
caps the device's memory pool (:mod:`gpu_stage.transform.cudf.device`), starts the lane, checks it on
generated bodies against the native core, and runs the cuDF reader path
(:mod:`gpu_stage.transform.cudf.path`) where asked or where the lane cannot start.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpu_stage import synth
from gpu_stage.transform.api import DEFAULT_POOL_BYTES, TransformSettings
from gpu_stage.transform.batch import ParseResult, RawBatch
from gpu_stage.transform.cudf import device
from gpu_stage.transform.cudf.path import CudfPath
from gpu_stage.transform.device.lane import LaneTransform
from gpu_stage.transform.packed import PackedBatch
from gpu_stage.transform.stages import StageClock
from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)

@dataclass
class LaneStats:
    """Running counts of rows per lane, for logs and for the parity result file."""

    rows: int = 0
    slow_rows: int = 0
    batches: int = 0
    slow_batches: int = 0

    @property
    def slow_fraction(self) -> float:
        """Share of rows that took the slow lane so far."""
        return self.slow_rows / self.rows if self.rows else 0.0

    def reset(self) -> None:
        """Start counting afresh (per benchmark or test run, so figures are not cumulative)."""
        self.rows = self.slow_rows = self.batches = self.slow_batches = 0


def _device_sync() -> Callable[[], None]:
    """A callable that waits for the device (cupy where present, else numba, both ship with cuDF)."""
    try:
        sync: Callable[[], None] = importlib.import_module("cupy").cuda.runtime.deviceSynchronize
    except ImportError:
        sync = importlib.import_module("numba.cuda").synchronize
    return sync


class GpuBackend:
    """Parses batches on the device: the device lane, or the cuDF reader path; see the module docstring."""

    name = "gpu"

    def __init__(
        self,
        settings: TransformSettings | None = None,
        *,
        pool_bytes: int = DEFAULT_POOL_BYTES,
        profile: bool = False,
        pinned: bool = True,
        device_screen: bool = True,
        lane: str = "kernel",
    ) -> None:
        """Cap the device memory pool, then start the device lane or the cuDF path.

        ``profile`` makes :attr:`clock` wait for the device at every stage edge, so stage times are
        exact (benchmarks); without it the stages are still timed, device work lands where it syncs.
        ``pinned`` and ``device_screen`` configure the cuDF path (:class:`CudfPath`).
        ``lane="kernel"`` (the default) runs the device lane (:mod:`gpu_stage.transform.device.lane`: one thread
        per body, Avro written on the device, the native core for the bodies it does not take);
        ``lane="cudf"`` the cuDF reader path described in the module docstring. Where the lane cannot
        compile or fails its start-up check, the cuDF path runs and a warning says why.
        """
        reason = device.unusable_reason()
        if reason is not None:
            msg = f"the GPU backend cannot run here: {reason}"
            raise ConfigError(msg)
        self.settings = settings or TransformSettings()
        device.cap_memory(pool_bytes)
        self.stats = LaneStats()
        self.clock = StageClock(_device_sync() if profile else None)
        self.lane: LaneTransform | None = self._device_lane() if lane == "kernel" else None
        self.cudf_path: CudfPath | None = None
        if self.lane is None:
            self.cudf_path = CudfPath(self.settings, self.clock, pinned=pinned, device_screen=device_screen)
        self.name = "gpu" if self.lane is not None else "gpu-cudf"

    def _device_lane(self) -> LaneTransform | None:
        """The device lane, checked on generated bodies against the native core; None where it fails."""
        try:
            cuda_lane = importlib.import_module("gpu_stage.transform.device.cuda")  # numba-cuda: only on a GPU host
            clock = self.clock
            transform = LaneTransform(
                self.settings,
                lambda tables, limit, cache, registers: cuda_lane.CudaExecutor(tables, limit, cache, registers, clock),
                clock,
            )
            batch = synth.batch(synth.bodies(256))
            got, want = transform.parse_on_device(batch), transform.native.parse(batch)
            if got.encoded.buf != want.encoded.buf or got.bad != want.bad or transform.taken_rows == 0:
                msg = "its output on generated bodies differs from the native core's"
                raise RuntimeError(msg)
        except Exception as exc:  # numba-cuda missing, a compile error, a wrong result: the cuDF path runs
            log.warning("device lane unavailable, the cuDF reader path runs: %s", exc)
            return None
        transform.taken_rows = transform.rows = 0
        self.clock.reset()
        log.info("device lane ready")
        return transform

    def set_profile(self, on: bool) -> None:
        """Make stage timings exact (wait for the device at each stage edge) or cheap."""
        self.clock.sync = _device_sync() if on else None

    def reset_counters(self) -> None:
        """Zero the lane counts and stage timings (after a warm-up, or per test run)."""
        self.stats.reset()
        self.clock.reset()

    def input_buffer(self, size: int) -> npt.NDArray[np.uint8]:
        """A host buffer to pack a batch into; the device lane reads it with no copy."""
        if self.lane is None:
            return np.empty(size + 1, dtype=np.uint8)
        buffer: npt.NDArray[np.uint8] = self.lane.packed.input_buffer(size)
        return buffer

    def parse_stream(self, batches: Iterable[PackedBatch], overlap: bool = True) -> Iterator[ParseResult]:
        """Packed batches through the device lane, two in flight (:mod:`gpu_stage.transform.device.packed`).

        Without the lane (the cuDF path), each batch is unpacked and parsed in turn.
        """
        if self.lane is None:
            yield from (self.parse(batch.to_raw()) for batch in batches)
            return
        packed = self.lane.packed
        rows, taken = packed.rows, packed.taken_rows
        for result in packed.stream(batches, overlap):
            n = packed.rows - rows
            self._count(n, n - (packed.taken_rows - taken), fallback=False)
            rows, taken = packed.rows, packed.taken_rows
            yield result
            # Not held while the next batch is made: the result's view pins a pooled output buffer,
            # which that batch may otherwise have to allocate anew.
            del result

    def parse(self, batch: RawBatch) -> ParseResult:
        """Parse and encode one batch (pure: same batch, same result, same bytes as the CPU backend)."""
        if self.lane is not None:
            taken = self.lane.taken_rows
            result: ParseResult = self.lane.parse(batch)
            self._count(len(batch), len(batch) - (self.lane.taken_rows - taken), fallback=False)
            return result
        assert self.cudf_path is not None  # one of the two is always built
        result, slow, fallback = self.cudf_path.parse(batch)
        self._count(len(batch), slow, fallback=fallback)
        return result

    def _count(self, n: int, slow: int, *, fallback: bool) -> None:
        stats = self.stats
        stats.rows += n
        stats.slow_rows += slow
        stats.batches += 1
        stats.slow_batches += int(fallback)
        log.debug("gpu batch: %d rows, %d slow lane (%.1f%% so far)", n, slow, 100 * stats.slow_fraction)

