r"""The GPU backend: the device lane by default, or cuDF's reader with a host slow lane (``gpu-cudf``).

The device lane (:mod:`gpu_stage.transform.device.lane`, :mod:`gpu_stage.transform.device.cuda`) walks each body
in one CUDA thread and writes the Avro datums on the device; this module starts it, checks it on
generated bodies against the native core, and falls back to the cuDF path below where it cannot.

What runs where, per batch, on the cuDF path:

1. Pre-screen: which bodies the device reader may see. One device thread per body
   (:mod:`gpu_stage.transform.cudf.screen`): size limit, ``{`` first and ``}`` last, no raw control
   bytes (a raw newline would split the JSON-lines buffer), strict UTF-8, no ``\\u`` escapes, no
   ``NaN``/``Infinity``, brackets that nest, no explicit null message/delta, no key repeated within
   one object (orjson keeps the last of duplicate keys, the device reader the first); other syntax
   errors are left to the reader's strict validation. Where numba-cuda cannot compile the kernel,
   :func:`gpu_stage.transform.cudf.rows.device_safe` decides per body on the host (orjson-strict).
   The safe bodies are joined into one newline-delimited buffer, copied in once (pinned).
2. Device (cuDF): two reads of that buffer with the declared schema (``gpu_read``): token texts for
   the type rules of ``gpu_stage/transform/contract/semantics.md`` and decoded values; the fast-lane mask (types,
   integer ranges, supported ``object``, integer ``created``, at most one choice, no unknown or
   ``metadata``/``error`` keys), first-choice selection, integer conversion, ``created`` to ms.
3. Host: the fast rows' columns are copied back; rows are built column by column, and content
   and tool arguments get their second-stage parse (:mod:`gpu_stage.transform.contract.content`, per value, CPU).
   Every other row, including every row that ends as a dead letter, takes the slow lane: the CPU
   reference per record (``gpu_lanes.reference_row``).
4. Host: all good rows, in batch order, are encoded by the same :class:`BulkEncoder` as the CPU backend.

So the output is byte-identical to the CPU backend by construction for slow rows, and by the
parity tests (shared vectors, real corpus, 100,000 generated bodies) for fast rows. If the device
read cannot give a row-aligned result in the declared shape (a mistyped nested value turns a struct
column into strings, a reader error), the whole batch takes the slow lane and a warning is logged.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.batch import ParseResult, RawBatch
from gpu_stage.transform.contract.content import ContentValidator, parse_content, parse_tool_arguments
from gpu_stage.transform.contract.extract import BODY_FIELDS
from gpu_stage.transform.contract.reference import ReferenceBackend
from gpu_stage.transform.cudf.rows import device_safe, reference_row
from gpu_stage.transform.packed import PackedBatch
from gpu_stage.transform.stages import StageClock
from llmpipe.dlq import BadRecord, Reason
from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_POOL_BYTES = 4 << 30
_POOL_STEP = 256


def _cudf() -> Any:
    """Import cuDF lazily, so this module imports on hosts without it; numba is pointed at RMM first."""
    if "cudf" not in sys.modules:
        numba_from_pool()
    return importlib.import_module("cudf")


def unusable_reason() -> str | None:
    """Why this backend cannot run here (no cuDF, no device answering), or None when it can."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip() == "-1":
        return "CUDA_VISIBLE_DEVICES=-1 hides every GPU"
    try:
        cudf = _cudf()
    except Exception as exc:
        return f"cuDF is not importable ({type(exc).__name__}: {exc})"
    try:
        total = int(cudf.Series([1, 2]).sum())
    except Exception as exc:
        return f"no CUDA device answered ({type(exc).__name__}: {exc})"
    return None if total == 3 else "the CUDA device returned a wrong result"


def cap_memory(pool_bytes: int) -> None:
    """Make every device allocation come from a pool capped at ``pool_bytes`` (vLLM shares the card)."""
    rmm = importlib.import_module("rmm")
    size = max(_POOL_STEP, pool_bytes - pool_bytes % _POOL_STEP)
    try:
        pool = rmm.mr.PoolMemoryResource(
            rmm.mr.CudaMemoryResource(), initial_pool_size=min(size, 256 << 20), maximum_pool_size=size
        )
        resource = rmm.mr.LimitingResourceAdaptor(pool, size)
    except (TypeError, ValueError, RuntimeError, MemoryError) as exc:
        msg = f"cannot create a GPU memory pool of {size} bytes: {exc}"
        raise ConfigError(msg) from exc
    rmm.mr.set_current_device_resource(resource)
    if not _numba_in_pool():
        log.warning("the device lane's buffers are outside the capped GPU pool: numba's CUDA context came first")
    log.info("gpu memory pool capped at %d bytes", size)


def numba_from_pool() -> bool:
    """Make numba-cuda's device arrays (the device lane's buffers) come from RMM's current resource.

    numba allocates with the CUDA driver unless told otherwise, so without this the lane's buffers
    (several times a batch's bytes for two in flight) would sit outside the cap. It must come before numba makes its
    CUDA context (a context keeps the allocator it was made with), hence before cuDF is first
    imported. False where RMM or numba-cuda is missing (no GPU stack here) or refuses the plugin.
    """
    found = _numba_and_rmm()
    if found is None:
        return False
    cuda, manager = found
    try:
        cuda.set_memory_manager(manager)
    except (AttributeError, RuntimeError) as exc:
        log.warning("the device lane's buffers are outside the capped GPU pool: %s", exc)
        return False
    return True


def _numba_in_pool() -> bool:
    """Whether numba's CUDA context allocates through RMM (made now if there is none yet)."""
    found = _numba_and_rmm()
    if found is None:
        return False
    cuda, manager = found
    try:
        return isinstance(cuda.current_context().memory_manager, manager)
    except (AttributeError, RuntimeError):
        return False


def _numba_and_rmm() -> tuple[Any, Any] | None:
    """``numba.cuda`` and RMM's numba plugin class; None where either is missing (no GPU stack here)."""
    try:
        return importlib.import_module("numba.cuda"), importlib.import_module("rmm.allocators.numba").RMMNumbaManager
    except ImportError as exc:
        log.debug("numba not pointed at RMM: %s", exc)
        return None


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


def _compile_screen(limit: int) -> Any:
    """The device pre-screen, checked on two bodies; None (host pre-screen) where it does not work."""
    try:
        screen = importlib.import_module("gpu_stage.transform.cudf.screen").DeviceScreen()
        probe = [b'{"id":"a"}', b'{"id":"a","id":"b"}']
        offsets = np.array([0, len(probe[0]), len(probe[0]) + len(probe[1])], dtype=np.int64)
        got = screen.run(np.frombuffer(b"".join(probe), dtype=np.uint8), offsets, limit).tolist()
    except Exception as exc:  # numba-cuda missing or failing to compile: the host screen is exact too
        log.warning("device pre-screen unavailable, screening on the host: %s", exc)
        return None
    if got != [1, 0]:
        log.warning("device pre-screen answered %s on its probe, screening on the host", got)
        return None
    log.info("device pre-screen ready")
    return screen


def _device_sync() -> Callable[[], None]:
    """A callable that waits for the device (cupy where present, else numba, both ship with cuDF)."""
    try:
        sync: Callable[[], None] = importlib.import_module("cupy").cuda.runtime.deviceSynchronize
    except ImportError:
        sync = importlib.import_module("numba.cuda").synchronize
    return sync


class GpuBackend:
    """Parses batches with cuDF on the device plus a CPU slow lane; see the module docstring."""

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
        """Cap the device memory pool, import cuDF, and build the shared encoder and validator.

        ``profile`` makes :attr:`clock` wait for the device at every stage edge, so stage times are
        exact (benchmarks); without it the stages are still timed, device work lands where it syncs.
        ``pinned`` copies each batch to the device once through a pinned buffer (``gpu_source``);
        off, cuDF reads the host bytes itself (two pageable copies per batch). ``device_screen`` runs
        the pre-screen as a device kernel (``gpu_screen``); where it cannot compile, the host one runs.
        ``lane="kernel"`` (the default) runs the device lane (:mod:`gpu_stage.transform.device.lane`: one thread
        per body, Avro written on the device, the native core for the bodies it does not take);
        ``lane="cudf"`` the cuDF reader path described in the module docstring. Where the lane cannot
        compile or fails its start-up check, the cuDF path runs and a warning says why.
        """
        reason = unusable_reason()
        if reason is not None:
            msg = f"the GPU backend cannot run here: {reason}"
            raise ConfigError(msg)
        self.settings = settings or TransformSettings()
        cap_memory(pool_bytes)
        self._cudf = _cudf()
        self._cpu = ReferenceBackend(self.settings)
        self._validator = ContentValidator(self.settings.record.content_schema)
        self.stats = LaneStats()
        self.clock = StageClock(_device_sync() if profile else None)
        source = importlib.import_module("gpu_stage.transform.cudf.source")
        self.pinned_stage: Any = source.PinnedStage() if pinned else None
        self.device_screen: Any = _compile_screen(self.settings.max_record_bytes) if device_screen else None
        self.lane: Any = self._device_lane() if lane == "kernel" else None
        self.name = "gpu" if self.lane is not None else "gpu-cudf"

    def _device_lane(self) -> Any:
        """The device lane, checked on generated bodies against the native core; None where it fails."""
        try:
            lane_mod = importlib.import_module("gpu_stage.transform.device.lane")
            cuda_lane = importlib.import_module("gpu_stage.transform.device.cuda")
            clock = self.clock
            transform = lane_mod.LaneTransform(
                self.settings, lambda tables, limit, cache: cuda_lane.CudaExecutor(tables, limit, cache, clock), clock
            )
            probe = importlib.import_module("gpu_stage.synth")
            batch = probe.batch(probe.bodies(256))
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
        limit = self.settings.max_record_bytes
        clock = self.clock
        with clock.stage("screen"):
            safe = self._screen(batch.values, limit)
        rows: dict[int, tuple[Any, ...]] = self._device_rows(batch, safe) if safe else {}
        good: list[tuple[Any, ...]] = []
        positions: list[int] = []
        bad: list[BadRecord] = []
        with clock.stage("slow_lane"):
            for i, value in enumerate(batch.values):
                row = rows.get(i)
                if row is None:
                    row = reference_row(value, self._validator, limit)
                    if isinstance(row[0], Reason):
                        bad.append(self._cpu.bad_record(batch, i, row[0], row[1]))
                        continue
                good.append(row)
                positions.append(i)
        self._count(len(batch), len(batch) - len(rows), fallback=bool(safe) and not rows)
        with clock.stage("encode"):
            encoded = self._cpu.encode_bodies(batch, good, positions)
        return ParseResult(encoded, bad)

    def _screen(self, values: Sequence[bytes], limit: int) -> list[int]:
        """Positions of the bodies the device reader may see (one kernel launch, or per body on the host)."""
        if self.device_screen is None or not values:
            return [i for i, value in enumerate(values) if device_safe(value, limit)]
        offsets = np.zeros(len(values) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=len(values)), out=offsets[1:])
        mask = self.device_screen.run(np.frombuffer(b"".join(values), dtype=np.uint8), offsets, limit)
        safe: list[int] = np.flatnonzero(mask).tolist()
        return safe

    def _count(self, n: int, slow: int, *, fallback: bool) -> None:
        stats = self.stats
        stats.rows += n
        stats.slow_rows += slow
        stats.batches += 1
        stats.slow_batches += int(fallback)
        log.debug("gpu batch: %d rows, %d slow lane (%.1f%% so far)", n, slow, 100 * stats.slow_fraction)

    def _device_rows(self, batch: RawBatch, safe: list[int]) -> dict[int, tuple[Any, ...]]:
        """Typed values of the fast-lane rows among ``safe`` positions, keyed by batch position."""
        gpu_read = importlib.import_module("gpu_stage.transform.cudf.read")
        with self.clock.stage("join"):
            buf = b"\n".join([batch.values[i] for i in safe])
        try:
            fast = gpu_read.read_fast(self._cudf, buf, len(safe), self.clock, self.pinned_stage)
        except gpu_read.DeviceReadError as exc:
            log.warning("gpu batch of %d rows takes the slow lane: %s", len(batch), exc)
            return {}
        positions = [i for i, ok in zip(safe, fast.lane, strict=True) if ok]
        with self.clock.stage("assemble"):
            rows = self._assemble(fast.columns)
        return dict(zip(positions, rows, strict=True))

    def _assemble(self, cols: dict[str, list[Any]]) -> list[tuple[Any, ...]]:
        """Fast-lane columns → rows of :data:`BODY_FIELDS`, built column by column.

        The second-stage parses (content against the schema, tool arguments) run per value on the
        host with the CPU backend's own functions, so their results are the reference's.
        """
        validator = self._validator
        texts = cols["content_text"]
        n = len(texts)
        none3: tuple[None, None, None] = (None, None, None)
        parsed = [none3 if text is None else parse_content(text, validator) for text in texts]
        tools = [parse_tool_arguments(a) for a in cols["tool_arguments"]]
        choices = [
            [{"index": index, "finish_reason": finish, "content": text}] if count else []
            for count, index, finish, text in zip(
                cols["num_choices"], cols["index"], cols["finish_reason"], texts, strict=True
            )
        ]
        derived: dict[str, list[Any]] = {
            "tool_arguments": [t[0] for t in tools],
            "tool_arguments_valid": [t[1] for t in tools],
            "choices": choices,
            "metadata": [None] * n,
            "extra": [{} for _ in range(n)],
            "content_valid": [p[0] for p in parsed],
            "content_error": [p[1] for p in parsed],
            "content": [p[2] for p in parsed],
        }
        columns = [derived[name] if name in derived else cols[name] for name in BODY_FIELDS]
        return list(zip(*columns, strict=True)) if n else []
