"""Throughput of the transform alone (raw bytes → Avro bytes), per backend.

``python -m bench.transform --records N --backends cpu,reference --out bench/results/x.json``
generates deterministic ~1 KB bodies (:mod:`gpu_stage.synth`), parses them in batches with each
backend in turn (one process, same bodies) and reports records/s and MB/s of input, and each
backend's ratio to the last one named. Body generation is not timed. Each run records a checksum of
the encoded output; the command fails if the backends disagree.

``--input packed`` hands the backends packed batches (:class:`~gpu_stage.transform.packed.PackedBatch`: values,
keys and headers in contiguous buffers, as a Kafka fetch delivers them; packing is not timed) as one
stream, so a backend that overlaps batches (the device lane) is timed over the whole stream: once
with the values in buffers of their own (``-packed``: the lane copies them into page-locked memory)
and once packed into the backend's input buffers (``-packed-pinned``: read where they are);
``--serial`` adds the pinned run with nothing overlapped (``-packed-serial``), the overlap's baseline.
``--profile FILE`` writes where the main thread spends the timed calls (cProfile, by own time);
profiling slows the calls, so its rates are not figures.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import hashlib
import io
import json
import logging
import os
import platform
import pstats
import socket
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro

from gpu_stage.runtime import reset_counters, tune_process
from gpu_stage.synth import SynthConfig, batch, bodies
from gpu_stage.transform import (
    ROW_LAYOUT,
    Backend,
    PackedBatch,
    ParseResult,
    RawBatch,
    ReferenceBackend,
    StreamBackend,
    TransformSettings,
)
from gpu_stage.transform import backends as select
from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)


_SUFFIX = {"": "", "stream": "-packed", "pinned": "-packed-pinned", "serial": "-packed-serial"}


LANE_KNOBS = (
    "write_piece_bytes", "headroom_parts", "write_streams", "measure_threads", "write_threads", "measure_registers",
    "write_registers", "write_warp", "write_spans", "slots",
)  # fmt: skip
"""The device lane's executor attributes a run may set: its output piece (0: a batch's output in one
piece), its byte buffers' headroom (0: none; see ``gpu_lane.capacity``), the streams pass 2 writes its
pieces on (``gpu_lane.WRITE_STREAMS``), each pass's threads per block (``gpu_lane.THREADS``), each
pass's register cap per thread (the kernel compiled anew under it), whether pass 2 gives each row
a warp (1) as ``--lane-order warp`` does pass 1, or a thread (0), the long strings a row of pass 2
may leave to spans copied a warp a row (0: none; ``Executor.write_spans``), and the batches a stream
keeps on the device at once (``Executor.slots``)."""


def make_backend(name: str, pool_bytes: int | None = None, lane: Mapping[str, int | None] | None = None) -> Backend:
    """The backend called ``name``: the GPU one with a memory pool of ``pool_bytes`` (default: the worker's).

    ``lane-cpu`` is the device lane compiled for this CPU, for its host stage times. ``lane`` sets
    the device lane's :data:`LANE_KNOBS` by name; None leaves one as the lane has it.
    """
    from gpu_stage.transform import DEFAULT_POOL_BYTES

    _check_knobs(lane or {})
    if name == "lane-cpu":
        from gpu_stage.transform.device import CpuLaneBackend

        return CpuLaneBackend(TransformSettings())

    backend = select.by_name(name, TransformSettings(), pool_bytes or DEFAULT_POOL_BYTES)
    set_lane_knobs(backend, lane or {})
    return backend


def _check_knobs(lane: Mapping[str, int | None]) -> None:
    """A name outside :data:`LANE_KNOBS` is a typo that would otherwise run the lane's defaults unnoticed."""
    unknown = sorted(set(lane) - set(LANE_KNOBS))
    if unknown:
        msg = f"not a device lane setting: {', '.join(unknown)}"
        raise ConfigError(msg)


def set_lane_knobs(backend: object, lane: Mapping[str, int | None]) -> None:
    """Set each given knob of ``lane`` on ``backend``'s device lane executor.

    A None value keeps the lane's own; a backend without a device lane, or an executor without that
    knob, is left as it is.
    """
    _check_knobs(lane)
    executor = getattr(getattr(backend, "lane", None), "executor", None)
    for knob, value in lane.items():
        if value is not None and hasattr(executor, knob):
            setattr(executor, knob, value)


def lane_knob_values(executor: object) -> dict[str, int | None]:
    """The :data:`LANE_KNOBS` as ``executor`` has them (None where it lacks one): what a result records."""
    return {knob: getattr(executor, knob, None) for knob in LANE_KNOBS}


def lane_knobs(args: argparse.Namespace) -> dict[str, int | None]:
    """The device lane settings ``args`` names (see :func:`add_lane_knobs`); None where not given."""
    return {knob: getattr(args, knob, None) for knob in LANE_KNOBS}


def add_lane_knobs(parser: argparse.ArgumentParser) -> None:
    """The options that set :data:`LANE_KNOBS` (each defaults to the lane's own)."""
    parser.add_argument(
        "--write-piece-mib",
        type=lambda text: int(text) << 20,
        default=None,
        dest="write_piece_bytes",
        help="the device lane's output piece in MiB (0: each batch's output in one piece; default: the lane's)",
    )
    parser.add_argument(
        "--headroom-parts",
        type=int,
        default=None,
        help="the device lane's byte buffers are allocated a 1/N larger than asked (0: exactly; default: the lane's)",
    )
    parser.add_argument(
        "--write-streams",
        type=int,
        default=None,
        help="streams the device lane's pass 2 writes its pieces on (1: the slot's; 2: one per output buffer)",
    )
    parser.add_argument("--measure-threads", type=int, default=None, help="threads per block of the lane's pass 1")
    parser.add_argument("--write-threads", type=int, default=None, help="threads per block of the lane's pass 2")
    parser.add_argument(
        "--measure-registers",
        type=int,
        default=None,
        help="register cap per thread of the lane's pass 1 kernel (0: the compiler's choice; default: the lane's)",
    )
    parser.add_argument(
        "--write-registers", type=int, default=None, help="register cap per thread of the lane's pass 2 kernel"
    )
    parser.add_argument(
        "--write-warp",
        type=int,
        choices=[0, 1],
        default=None,
        help="1: the lane's pass 2 gives each row a warp, its strings copied 32 bytes a step (rows as they came); "
        "0: a thread (the lane's own)",
    )
    parser.add_argument(
        "--write-spans",
        type=int,
        default=None,
        help="long strings a row of the lane's pass 2 may leave to a copy a warp a row (0: none; default: the lane's)",
    )
    parser.add_argument(
        "--lane-slots",
        type=int,
        default=None,
        dest="slots",
        help="batches the device lane's stream keeps on the device at once (default: the lane's)",
    )


def _slow_fraction(backend: Backend | StreamBackend) -> float | None:
    """Share of rows the GPU backend sent to its CPU slow lane (None for backends without lanes)."""
    stats = getattr(backend, "stats", None)
    return None if stats is None else round(float(stats.slow_fraction), 4)


@dataclass
class Timed:
    """What one pass of a backend over a list of batches produced: per-batch seconds and the output."""

    seconds: list[float] = field(default_factory=list)
    good: int = 0
    bad: int = 0
    results: list[ParseResult] = field(default_factory=list)
    stage_seconds: dict[str, float] | None = None
    slow_fraction: float | None = None
    pass_seconds: list[float] = field(default_factory=list)
    """Total seconds of every timed pass, when there were several (:func:`median_pass`)."""
    _digest: Any = field(default_factory=hashlib.sha256, repr=False)
    _shapes: list[tuple[int, int, int]] = field(default_factory=list, repr=False)

    @property
    def sha256(self) -> str:
        """Checksum of every encoded buffer so far, in order."""
        return str(self._digest.hexdigest())

    @property
    def shapes(self) -> list[tuple[int, int, int]]:
        """Rows, dead letters and bytes of each batch counted so far."""
        return list(self._shapes)

    def with_output_of(self, other: Timed) -> Timed:
        """These times with ``other``'s checksum and held results (the pass that checked its output)."""
        self._digest, self.results = other._digest, other.results
        return self

    def add(self, result: ParseResult, seconds: float, keep: bool) -> None:
        """Count one batch's result and its time; the checksum covers every result so far."""
        self.count(result, seconds)
        self.check(result, keep)

    def count(self, result: ParseResult, seconds: float) -> None:
        """One batch's time and counts, and its shape (rows, dead letters, bytes) for :meth:`check_all`."""
        self.seconds.append(seconds)
        self.good += len(result.encoded)
        self.bad += len(result.bad)
        self._shapes.append(_shape(result))

    def check(self, result: ParseResult, keep: bool) -> None:
        """Add one batch's bytes to the checksum (and hold the result with ``keep``)."""
        self._digest.update(result.encoded.buf)
        if keep:
            self.results.append(result)

    def check_all(self, results: Iterable[ParseResult], keep: bool) -> bool:
        """:meth:`check` every result of a second stream; whether their shapes are the counted ones'."""
        shapes = []
        for result in results:
            shapes.append(_shape(result))
            self.check(result, keep)
        return shapes == self._shapes

    def capture(self, backend: Backend | StreamBackend) -> None:
        """The backend's stage times and slow-lane share now: those of the batches timed so far."""
        clock = getattr(backend, "clock", None)
        self.stage_seconds = None if clock is None else clock.rounded()
        self.slow_fraction = _slow_fraction(backend)


def _shape(result: ParseResult) -> tuple[int, int, int]:
    return len(result.encoded), len(result.bad), len(result.encoded.buf)


def _profiled(profiler: cProfile.Profile | None) -> contextlib.AbstractContextManager[Any]:
    """``profiler`` enabled for the block (nothing without one)."""
    return profiler if profiler is not None else contextlib.nullcontext()


def time_batches(
    backend: Backend,
    batches: list[RawBatch],
    keep: bool = False,
    profiler: cProfile.Profile | None = None,
    passes: int = 1,
) -> Timed:
    """Parse every batch once per pass (after one untimed warm-up call), timing each ``parse`` call alone.

    Shared by this module and ``python -m bench`` so both time the transform the same way; ``keep``
    holds on to the results for callers that check values afterwards; ``profiler`` profiles the
    timed calls. With several ``passes`` the pass of median length is returned (see
    :func:`median_pass`); the checksum and ``keep``'s results are the first pass's, and every pass
    must give the same rows, dead letters and bytes per batch.
    """
    backend.parse(batches[0])  # warm-up: first-call costs are not throughput
    timed = []
    for k in range(max(1, passes)):
        reset_counters(backend)
        out = Timed()
        for raw in batches:
            start = time.perf_counter()
            with _profiled(profiler):
                result = backend.parse(raw)
            out.count(result, time.perf_counter() - start)
            if k == 0:
                out.check(result, keep)
        out.capture(backend)
        timed.append(out)
    return median_pass(backend, timed).with_output_of(timed[0])


def median_pass(backend: Backend | StreamBackend, timed: list[Timed]) -> Timed:
    """The pass of median total time (the later of the two middle ones for an even count), with every pass's.

    One pass of a few batches on a shared host can be slowed several-fold by what else runs there;
    the median of a few passes is the figure that repeats. Every pass must have given the same rows,
    dead letters and bytes per batch: else they did not time the same work.
    """
    if any(t.shapes != timed[0].shapes for t in timed):
        name = getattr(backend, "name", "backend")
        msg = f"{name}: passes over the same batches differ in rows, dead letters or bytes"
        raise ConfigError(msg)
    middle = sorted(timed, key=lambda t: sum(t.seconds))[len(timed) // 2]
    middle.pass_seconds = [round(sum(t.seconds), 6) for t in timed]
    return middle


def time_stream(
    backend: StreamBackend,
    batches: list[PackedBatch],
    overlap: bool = True,
    keep: bool = False,
    profiler: cProfile.Profile | None = None,
    passes: int = 1,
) -> Timed:
    """Parse packed batches as one stream per pass (after a warm-up stream of the first three), then check them.

    A stream backend may overlap batches, so one batch's time is not its own: ``seconds`` holds the
    time between consecutive results (the first counted from the start of the stream). The timed
    stream only counts each result and lets it go. Hashing it there, outside the timing, would give
    that time to what the backend runs in the background meanwhile (the native core's share of the
    next batch), and holding results would keep the output pool from reusing its buffers. So the
    checksum (and ``keep``) come from a second, untimed stream over the same batches, whose results
    must have the timed ones' shapes (rows, dead letters and bytes per batch). ``profiler`` profiles
    the timed stream. The warm-up is three batches, so that the output pool holds the buffers a
    stream of two in flight uses (three for a caller that holds each result until it has the next)
    before the timed stream, as it would after the first batches of a long one; none of its results
    is held into the timed stream. With several ``passes`` the timed stream runs that many times and
    the one of median length is returned (:func:`median_pass`).
    """
    for warm in backend.parse_stream(batches[:3], overlap=overlap):
        del warm  # none held into the timed stream: each would keep a pooled buffer busy there
    out = median_pass(backend, [_timed_stream(backend, batches, overlap, profiler) for _ in range(max(1, passes))])
    if not out.check_all(backend.parse_stream(batches, overlap=overlap), keep):
        name = getattr(backend, "name", "backend")
        msg = f"{name}: the checked stream differs from the timed one in rows, dead letters or bytes"
        raise ConfigError(msg)
    return out


def _timed_stream(
    backend: StreamBackend, batches: list[PackedBatch], overlap: bool, profiler: cProfile.Profile | None
) -> Timed:
    """One timed stream over ``batches``: each result counted and let go, the stage times of these batches."""
    reset_counters(backend)
    out = Timed()
    results = iter(backend.parse_stream(batches, overlap=overlap))
    last = time.perf_counter()
    while True:
        with _profiled(profiler):
            result = next(results, None)
        now = time.perf_counter()
        if result is None:
            break
        out.count(result, now - last)
        del result
        last = time.perf_counter()
    out.capture(backend)
    return out


def _device_facts(backend: Backend, batches: list[RawBatch], timed: Timed) -> dict[str, Any]:
    """Stage seconds of the timed batches and, for the device lane, its device memory against the largest batch's."""
    facts: dict[str, Any] = {} if timed.stage_seconds is None else {"stage_seconds": timed.stage_seconds}
    lane = getattr(backend, "lane", None)
    if lane is not None and hasattr(lane.executor, "device_bytes"):
        largest = max(sum(map(len, b.values)) for b in batches)
        held = lane.executor.device_bytes()
        facts |= {
            "device_bytes": held,
            "largest_batch_bytes": largest,
            "device_over_batch": round(held / largest, 2),
            **lane_knob_values(lane.executor),
        }
        if hasattr(lane.executor, "kernel_resources"):
            facts["kernels"] = lane.executor.kernel_resources()
    return facts


@functools.lru_cache(maxsize=1)
def corpus_batches(records: int, batch_size: int, seed: int, body_bytes: int) -> tuple[list[bytes], list[RawBatch]]:
    """The bodies and their batches, made once for every backend and input of one invocation."""
    values = bodies(records, SynthConfig(seed=seed, target_bytes=body_bytes))
    return values, [batch(values[i : i + batch_size], first_offset=i) for i in range(0, records, batch_size)]


def run(
    records: int,
    backend: Backend,
    batch_size: int,
    seed: int,
    packed: str = "",
    profiler: cProfile.Profile | None = None,
    body_bytes: int = SynthConfig.target_bytes,
) -> dict[str, Any]:
    """Time parse → Avro over ``records`` bodies in batches of ``batch_size``.

    ``packed`` is ``""`` (batches of Python objects, one ``parse`` call each), ``"stream"`` (packed
    batches in buffers of their own through :meth:`StreamBackend.parse_stream`), ``"pinned"`` (packed
    into the backend's own input buffers, as a fetch into them would leave them) or ``"serial"``
    (pinned, nothing overlapped).
    """
    values, batches = corpus_batches(records, batch_size, seed, body_bytes)
    if packed:
        if not isinstance(backend, StreamBackend):
            msg = f"backend {backend.name} does not take packed batches"
            raise ConfigError(msg)
        allocate = None if packed == "stream" else backend.input_buffer
        streamed = [PackedBatch.of(b, allocate) for b in batches]
        timed = time_stream(backend, streamed, overlap=packed != "serial", profiler=profiler)
    else:
        timed = time_batches(backend, batches, profiler=profiler)
    good, bad, elapsed = timed.good, timed.bad, sum(timed.seconds)
    input_bytes = sum(map(len, values))
    return {
        "backend": backend.name,
        "input": f"packed ({packed})" if packed else "objects",
        "records": records,
        "batch_size": batch_size,
        "seed": seed,
        "good": good,
        "bad": bad,
        "input_bytes": input_bytes,
        "mean_body_bytes": round(input_bytes / max(records, 1), 1),
        "seconds": round(elapsed, 4),
        "records_per_s": round(records / elapsed, 1) if elapsed else None,
        "input_mb_per_s": round(input_bytes / 1e6 / elapsed, 2) if elapsed else None,
        "output_sha256": timed.sha256,
        "slow_lane_fraction": timed.slow_fraction,
        **_device_facts(backend, batches, timed),
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def encoder_baseline(records: int, batch_size: int, seed: int) -> dict[str, Any]:
    """Encoding alone on the CPU backend's rows: the bulk encoder vs ``fastavro.schemaless_writer`` per row.

    Both encode exactly the same typed rows (fastavro gets them as dicts, as any per-record producer
    would); the outputs are checked for identity before the times are reported.
    """
    backend = ReferenceBackend()
    values = bodies(records, SynthConfig(seed=seed))
    batches = [batch(values[i : i + batch_size], first_offset=i) for i in range(0, records, batch_size)]
    typed = [backend.typed_rows(raw)[:2] for raw in batches]
    parsed = fastavro.parse_schema(backend.settings.record.avro)
    ours = theirs = 0.0
    rows_total = 0
    for rows, positions in typed:
        dicts = [dict(zip(ROW_LAYOUT, row, strict=True)) for row in rows]
        start = time.perf_counter()
        encoded = backend.encode(rows, positions, [None] * len(rows))
        ours += time.perf_counter() - start
        start = time.perf_counter()
        out = io.BytesIO()
        for row in dicts:
            fastavro.schemaless_writer(out, parsed, row)
        theirs += time.perf_counter() - start
        if out.getvalue() != encoded.buf:
            msg = "bulk encoder output differs from fastavro"
            raise ConfigError(msg)
        rows_total += len(rows)
    return {
        "rows": rows_total,
        "bulk_rows_per_s": round(rows_total / ours, 1) if ours else None,
        "fastavro_rows_per_s": round(rows_total / theirs, 1) if theirs else None,
        "bulk_over_fastavro": round(theirs / ours, 2) if ours else None,
    }


def write_result(path: Path | None, result: dict[str, Any]) -> None:
    """A benchmark's result as indented JSON at ``path`` (its folder made first); nothing without one."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


def _write_profile(profiler: cProfile.Profile, path: Path) -> None:
    """The profile's top functions by own time, then by cumulative time, as text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(40)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: every backend named, on the same bodies, with ratios to the last one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument(
        "--backends",
        default="cpu,reference",
        help="comma list of gpu, gpu-cudf, lane-cpu, cpu, reference; ratios are to the last one named (the baseline)",
    )
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=SynthConfig.seed)
    parser.add_argument(
        "--body-bytes", type=int, default=SynthConfig.target_bytes, help="approximate size of each generated body"
    )
    parser.add_argument("--baseline", action="store_true", help="also time fastavro per-row encoding")
    parser.add_argument(
        "--input",
        choices=("objects", "packed", "pinned", "both"),
        default="objects",
        help="batches of Python objects (one parse call each), packed batches (contiguous buffers, "
        "as a fetch delivers them) streamed through the backends that take them, only the run packed "
        "into the backends' input buffers, or both",
    )
    parser.add_argument("--gpu-pool-bytes", type=int, default=None, help="GPU memory pool cap (default: the worker's)")
    add_lane_knobs(parser)
    parser.add_argument(
        "--serial", action="store_true", help="with --input packed, also run each backend with nothing overlapped"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the result JSON here")
    parser.add_argument(
        "--profile", type=Path, default=None, help="write the main thread's profile of the timed calls here"
    )
    args = parser.parse_args(argv)
    profiler = cProfile.Profile() if args.profile else None
    tune_process()  # as the worker does
    names = [n for n in args.backends.split(",") if n]
    packed_modes = ["stream", "pinned", "serial"] if args.serial else ["stream", "pinned"]
    modes = {"objects": [""], "packed": packed_modes, "pinned": ["pinned"], "both": ["", *packed_modes]}[args.input]
    runs = []
    for name in names:
        backend = make_backend(name, args.gpu_pool_bytes, lane_knobs(args))
        for mode in modes:
            if mode in ("pinned", "serial") and backend.name == "cpu":
                continue  # one call per batch: the same as its stream
            one = run(args.records, backend, args.batch_size, args.seed, mode, profiler, args.body_bytes)
            one["backend"] += _SUFFIX[mode]
            runs.append(one)
    for one in runs:
        sys.stdout.write(
            f"{one['backend']}: {one['records']} records in {one['seconds']} s = "
            f"{one['records_per_s']} records/s, {one['input_mb_per_s']} MB/s "
            f"(mean body {one['mean_body_bytes']} B, good {one['good']}, bad {one['bad']})\n"
        )
    base = runs[-1]
    ratios = {r["backend"]: round(r["records_per_s"] / base["records_per_s"], 2) for r in runs[:-1]}
    if ratios:
        sys.stdout.write(f"ratio to {base['backend']}: {ratios}\n")
    if len({r["output_sha256"] for r in runs}) != 1:
        msg = f"backends disagree on the output bytes: { {r['backend']: r['output_sha256'] for r in runs} }"
        raise ConfigError(msg)
    rate = {r["backend"]: r["records_per_s"] for r in runs}
    matrix = {a: {b: round(rate[a] / rate[b], 2) for b in rate} for a in rate}
    result: dict[str, Any] = {
        "runs": runs,
        "baseline": base["backend"],
        "ratios": ratios,
        "ratio_matrix": matrix,
        "same_output": True,
    }
    if profiler is not None:
        _write_profile(profiler, args.profile)
    if args.baseline:
        result["encoder_baseline"] = encoder_baseline(args.records, args.batch_size, args.seed)
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
