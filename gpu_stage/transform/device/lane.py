"""The device lane: raw bodies → Avro datums with one thread per body, for CUDA or (in tests) the CPU.

The kernels (:mod:`gpu_stage.transform.device.kernels` compiles them) run on CUDA
(:class:`gpu_stage.transform.device.cuda.CudaExecutor`) or on the CPU (:class:`CpuExecutor`, what the
tests compare, byte for byte, with the native core).

Per batch (:meth:`LaneTransform.parse`): the native core packs the values into one buffer and pre-encodes the
columns that come from the record rather than the body (``request_id``, ``latency_ms`` +
``attributes``); pass 1 walks every body and returns its encoded size or -1; the host turns the sizes
into offsets (a prefix sum over ``n`` integers); pass 2 writes every taken row's datum into one
buffer, which comes back in one copy. Pass 1 also finds the dead letters whose text is a constant
(upstream error bodies; bodies not UTF-8, not JSON or not an object), which the host makes from their
codes. Bodies the lane does not take (the other dead letters, rare shapes) are transformed
by the native core, and the two results are merged in batch order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpu_stage.runtime import usable_cores
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.batch import EncodedRows, ParseResult, RawBatch
from gpu_stage.transform.device import slots as layout
from gpu_stage.transform.device.columns import I64, LaneInput
from gpu_stage.transform.device.executor import CpuExecutor, Executor
from gpu_stage.transform.device.merge import LaneFound, combine, int_columns, sub_batch
from gpu_stage.transform.device.packed import PackedLane
from gpu_stage.transform.device.tables import ContentTables, check_layout
from gpu_stage.transform.native import NativeBackend
from gpu_stage.transform.packed import PackedBatch
from gpu_stage.transform.stages import StageClock

log = logging.getLogger(__name__)


class LaneTransform:
    """A batch through the lane plus the native core for what the lane does not take."""

    def __init__(
        self,
        settings: TransformSettings,
        executor: Callable[[ContentTables, int, Path | None, int], Executor],
        clock: StageClock | None = None,
    ) -> None:
        """Check the layout and build the pass runner.

        ``executor`` builds the pass runner from the content tables, the size limit, the kernel cache
        and pass 1's register cap (``TransformSettings.lane_registers``; 0: the compiler's choice):
        one build of the lane serves every kernel.
        """
        self.clock = clock or StageClock()
        record = settings.record
        check_layout(record)
        # The rows the lane leaves (dead letters among them) are this process's CPU work: every core
        # it may use takes a share of a large batch's, unless the settings give it fewer.
        self.native = NativeBackend(settings, threads=settings.native_threads or usable_cores())
        tables = ContentTables.of(record.content_schema)
        self.executor = executor(tables, settings.max_record_bytes, settings.kernel_cache, settings.lane_registers)
        self.executor.lane_order = settings.lane_order
        self.executor.device_wait = settings.device_wait
        self.executor.slots = settings.lane_slots
        self.taken_rows = 0
        self.rows = 0
        self.min_rows = settings.gpu_min_batch
        """Batches below this many records go to the native core whole (``TransformSettings.gpu_min_batch``)."""
        self.packed = PackedLane(self.native, self.executor, self.clock)

    def measure(self, batch: RawBatch) -> I64:
        """Pass 1 alone: each row's encoded size, or ``NOT_TAKEN`` (the native core's) or ``UPSTREAM_ERROR``."""
        if not len(batch):
            return np.zeros(0, dtype=np.int64)
        li = LaneInput.of(self.native._core, batch, self.executor.staging, int_columns(batch))
        return self.executor.sizes(self.executor.submit(li, len(batch), 0))

    def parse(self, batch: RawBatch) -> ParseResult:
        """Parse and encode one batch: byte-identical to the native core alone."""
        n = len(batch)
        if 0 < n < self.min_rows:  # below the device's fixed cost: the native core's alone
            self.rows += n
            with self.clock.stage("lane_small_native"):
                return self.native.parse(batch)
        return self.parse_on_device(batch)

    def parse_on_device(self, batch: RawBatch) -> ParseResult:
        """:meth:`parse` through the device passes whatever the batch's size."""
        n = len(batch)
        if n == 0:
            return ParseResult(EncodedRows(), [])
        with self.clock.stage("lane_pack"):
            columns = int_columns(batch)
            li = LaneInput.of(self.native._core, batch, self.executor.staging, columns)
        sizes, taken, offsets, buf = self.executor.encode(li, n)
        fast = EncodedRows(buf, offsets, taken, [])
        rest_positions = np.flatnonzero(sizes == layout.NOT_TAKEN)
        with self.clock.stage("lane_rest_native"):
            rest = self.native.run(sub_batch(batch, rest_positions, columns))
        self.rows += n
        self.taken_rows += n - len(rest_positions)
        with self.clock.stage("lane_merge"):
            return combine(batch, fast, rest, rest_positions, LaneFound.of(sizes), self.native.settings.stage)


class CpuLaneBackend:
    """The device lane compiled for this CPU, as a backend: its host stages measured where no GPU is.

    Slower than the native core (numba on one core runs the per-row passes), so never a worker's
    choice; ``python -m bench.transform --backends lane-cpu`` reports its stage seconds
    (pack, the native core's share, merge), which are the GPU backend's host work.
    """

    name = "lane-cpu"

    def __init__(self, settings: TransformSettings) -> None:
        """Compile the lane with numba (about a minute)."""
        self.lane = LaneTransform(settings, CpuExecutor)
        self.clock = self.lane.clock

    def parse(self, batch: RawBatch) -> ParseResult:
        """The lane's result: byte-identical to the native core's."""
        return self.lane.parse(batch)

    def input_buffer(self, size: int) -> npt.NDArray[np.uint8]:
        """A host buffer to pack a batch into; the lane reads it with no copy."""
        return self.lane.packed.input_buffer(size)

    def parse_stream(self, batches: Iterable[PackedBatch], overlap: bool = True) -> Iterator[ParseResult]:
        """Packed batches through the lane, two in flight (see :mod:`gpu_stage.transform.device.packed`)."""
        return self.lane.packed.stream(batches, overlap)

    def reset_counters(self) -> None:
        """Forget the stage times of the warm-up batch."""
        self.clock.reset()
