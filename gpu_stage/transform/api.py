"""The interface every parsing backend implements, and the settings they share.

A backend turns one :class:`RawBatch` into a :class:`ParseResult`; it never talks to Kafka and never
reads the clock, so the same batch always gives the same bytes and the same dead letters, whichever
backend runs (``gpu_stage/transform/contract/semantics.md`` is the contract both implement).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from gpu_stage.transform.batch import ParseResult, RawBatch
from gpu_stage.transform.packed import PackedBatch
from llmpipe.dlq import BadRecord, Reason
from llmpipe.record import TypedRecord

STAGE = "gpu_stage"
POLL_S = 0.0002
"""``device_wait="poll"``'s sleep between two questions to the device: a batch's pass takes milliseconds."""
DEFAULT_MAX_RECORD_BYTES = 1 << 20
DEFAULT_POOL_BYTES = 2 << 30
"""The GPU memory pool's cap by default, the worker's ``--gpu-pool-bytes`` too (vLLM keeps the rest of the card)."""
LaneOrder = Literal["arrival", "length", "balanced", "warp"]
LANE_ORDERS: tuple[LaneOrder, ...] = ("arrival", "length", "balanced", "warp")
"""The device lane's thread orders (:attr:`TransformSettings.lane_order`)."""
ORDERED_LANES: tuple[LaneOrder, ...] = ("length", "balanced")
"""The orders whose threads take row ``order[t]`` (the ordered kernels), ``order`` made on the device."""
DEALT_LANES: tuple[LaneOrder, ...] = ("balanced",)
"""The ordered lanes whose sorted rows are then dealt round the warps (``order.deal_rows``)."""
LANE_REGISTERS = (32, 255)
"""The register caps :attr:`TransformSettings.lane_registers` takes besides 0 (a thread holds at most 255)."""
LANE_REGISTERS_DEFAULT = 96
"""Pass 1's register cap by default: 5 blocks of its threads resident per SM instead of 3 (Hopper)."""
LANE_SLOTS = (2, 4)
"""How many batches the device lane keeps on the device at once (:attr:`TransformSettings.lane_slots`)."""
LANE_SLOTS_DEFAULT = 3
DeviceWait = Literal["driver", "poll", "block"]
DEVICE_WAITS: tuple[DeviceWait, ...] = ("driver", "poll", "block")
"""How the GPU backend's feeding thread waits for the device (:attr:`TransformSettings.device_wait`)."""


def default_kernel_cache() -> Path:
    """Where compiled device-lane kernels are kept between runs: the user's cache directory."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llmpipe" / "kernels"


@dataclass(frozen=True)
class TransformSettings:
    """What a backend needs to know: the typed record (content schema), the size limit, the kernel cache.

    ``kernel_cache`` is where the device lane keeps its compiled kernels between runs (None: compile
    them at every start, tens of seconds). ``native_threads`` is how many threads the native core
    uses for the rows the device lane leaves (None: every core this process may use; several GPU
    workers on one host each take their share of the cores instead).
    """

    record: TypedRecord = field(default_factory=TypedRecord.from_file)
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    stage: str = STAGE
    kernel_cache: Path | None = field(default_factory=default_kernel_cache)
    native_threads: int | None = None
    gpu_min_batch: int = 0
    """Batches of fewer records go to the native core whole (GPU backend): a device pass has a fixed
    cost of a few milliseconds, more than the native core takes for a few hundred bodies, and a
    small batch is a latency-bound one. 0 sends every batch to the device."""
    lane_order: LaneOrder = "balanced"
    """Which row each thread of the device lane takes (GPU backend): ``arrival``, as they come;
    ``length``, rows of like body length side by side in each warp; ``balanced`` (the default), those
    rows dealt round the warps so that every warp holds about the same bytes
    (:mod:`gpu_stage.transform.device.order`); ``warp``, in pass 1 a whole warp per row,
    its 32 threads reading the body's strings together (:mod:`gpu_stage.transform.device.warp`).
    The output is the same whichever."""
    lane_registers: int = LANE_REGISTERS_DEFAULT
    """Registers per thread that pass 1's kernels of the device lane may take (GPU backend; 0: the
    compiler's choice, else 32 to 255; 96 by default). Pass 1 takes about 138 uncapped, so an SM keeps
    3 blocks of its threads resident; its threads mostly wait on memory, and more resident warps hide
    more of that wait, at the price of values spilled to local memory. On an H100, capped at 96 (5
    blocks) the device lane took real-shaped bodies at 1.06x and ~1 KB generated bodies at 1.04x of
    the compiler's choice, each pair in one run (``docs/performance.md``). Each cap is a build of its
    own, compiled once into the kernel cache. The output is the same whichever."""
    lane_slots: int = LANE_SLOTS_DEFAULT
    """Batches the device lane keeps on the device at once, each with a CUDA stream and buffers of
    its own (GPU backend, packed streams; 2 to 4, 3 by default). With two, one batch's pass 2 runs
    beside the next one's pass 1, and the device waits while the feeding thread turns a batch's
    sizes into its pass 2 and copies the next batch in. A third slot queues another batch's copy in
    and pass 1 ahead, so the device has work meanwhile, for one more slot's buffers (about five times
    the batch's bytes). The output is the same whichever."""
    device_wait: DeviceWait = "driver"
    """How the device lane's feeding thread waits for a batch's passes (GPU backend): ``driver``, the
    CUDA driver's own wait, which spins on a core while the host has more cores than CUDA contexts;
    ``poll``, asking the device whether the batch is done every :data:`POLL_S` and sleeping in
    between, so that the core is free for the process's other threads (and other workers) meanwhile;
    ``block``, waiting on events made for blocking waits (``CU_EVENT_BLOCKING_SYNC``): the driver puts
    the thread to sleep and wakes it when the device reaches the event, with no polling period."""


@runtime_checkable
class Backend(Protocol):
    """A batch parser: raw bodies in, Avro datums of good rows plus dead letters out."""

    @property
    def name(self) -> str:
        """Short backend name for logs and metrics (``cpu``, ``gpu``)."""
        ...

    def parse(self, batch: RawBatch) -> ParseResult:
        """Parse and encode one batch; every position ends up good or as exactly one dead letter."""
        ...


@runtime_checkable
class StreamBackend(Protocol):
    """A backend that also takes packed batches (contiguous buffers, no object per record) in a stream."""

    def input_buffer(self, size: int) -> Any:
        """A host buffer of at least ``size`` bytes to pack a batch into, read by this backend with no copy."""
        ...

    def parse_stream(self, batches: Iterable[PackedBatch], overlap: bool = True) -> Iterator[ParseResult]:
        """Each batch's result, in order: the same rows and dead letters as :meth:`Backend.parse`.

        With ``overlap`` a backend may work on the next batch before the caller has taken this one's
        result; without, each batch is done before the next is read.
        """
        ...


def dead_letter(batch: RawBatch, i: int, stage: str, reason: Reason, text: str) -> BadRecord:
    """The dead letter of batch position ``i``: its raw bytes, key, headers and position, and why."""
    return BadRecord(
        raw=batch.values[i],
        stage=stage,
        reason=reason,
        error=text,
        key=batch.keys[i],
        topic=batch.topic,
        partition=int(batch.partitions[i]),
        offset=int(batch.offsets[i]),
        source_headers=tuple(batch.headers[i]),
    )
