"""``python -m bench.lane_timeline``: where the device lane's packed stream spends a batch, on the device.

CUDA events recorded on each slot's stream around the executor's steps (the copy in, pass 1 with
the sizes' copy back, pass 2's kernels, and pass 2 up to its last copy out, on the copy stream) and
host clocks around the two waits of the thread that feeds the device give, per batch, when the
device ran each step and when that thread waited. Summed up: the mean device time of each step,
and the gap between one batch's pass 2 and the next one's, which is the part of the cycle the
device waits for the host. Needs a GPU; the rate printed is not a figure (the events and wrappers
add work to that thread).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import corpus
from bench.backends import batches
from bench.transform import add_lane_knobs, corpus_batches, lane_knob_values, lane_knobs, make_backend
from gpu_stage.transform import PackedBatch
from gpu_stage.transform.api import LANE_ORDERS


@dataclass
class Step:
    """One step of one batch: device interval (ms from the stream's start) and host interval, if timed."""

    batch: int
    name: str
    device_ms: tuple[float, float] | None
    host_ms: tuple[float, float] | None


class Timeline:
    """Wraps a ``CudaExecutor``'s steps with events (device) and clocks (host), batch by batch."""

    def __init__(self, executor: Any) -> None:
        self.cuda: Any = importlib.import_module("numba.cuda")
        self.executor = executor
        self._raw: list[tuple[int, str, Any, Any, float, float]] = []
        self._batch = 0
        self._origin: Any = None
        self._host_origin = 0.0
        self._wrap()

    def _event(self, stream: Any) -> Any:
        event = self.cuda.event(timing=True)
        event.record(stream)
        return event

    def _wrap(self) -> None:
        ex = self.executor
        submit, put_block, write, sizes, wait = ex.submit, ex._put_block, ex.submit_write, ex.sizes, ex.wait

        def timed_submit(li: Any, n: int, slot: int) -> Any:
            stream, host = ex._slot(slot).stream, time.perf_counter()
            self._batch += 1
            before = self._event(stream)
            handle = submit(li, n, slot)
            handle.timeline_batch = self._batch - 1
            self._raw.append((self._batch - 1, "pass1", before, self._event(stream), host, time.perf_counter()))
            return handle

        def timed_block(k: str, li: Any, stream: Any) -> Any:
            before = self._event(stream)
            columns = put_block(k, li, stream)
            self._raw.append((self._batch - 1, "copy_in", before, self._event(stream), 0.0, 0.0))
            return columns

        def timed_write(handle: Any, starts: Any, offsets: Any, out: Any, rows: Any = None) -> None:
            host, before = time.perf_counter(), self._event(handle.stream)
            write(handle, starts, offsets, out, rows)
            queued = time.perf_counter()
            kernels = self._event(handle.stream)
            # The copies out run on the executor's copy stream (when it has one): pass 2 ends with them.
            after = self._event(getattr(ex, "_copies", None) or handle.stream)
            self._raw.append((handle.timeline_batch, "pass2", before, after, host, queued))
            self._raw.append((handle.timeline_batch, "pass2_kernels", before, kernels, 0.0, 0.0))

        def timed_sizes(handle: Any) -> Any:
            host = time.perf_counter()
            got = sizes(handle)
            self._raw.append((handle.timeline_batch, "wait_pass1", None, None, host, time.perf_counter()))
            return got

        def timed_wait(handle: Any) -> None:
            host = time.perf_counter()
            wait(handle)
            self._raw.append((handle.timeline_batch, "wait_pass2", None, None, host, time.perf_counter()))

        ex.submit, ex._put_block, ex.submit_write, ex.sizes, ex.wait = (
            timed_submit, timed_block, timed_write, timed_sizes, timed_wait,
        )  # fmt: skip

    def start(self) -> None:
        """Forget what was recorded (a warm-up) and take the time origin on both sides."""
        self.cuda.synchronize()
        self._raw.clear()
        self._batch = 0
        self._origin = self._event(0)
        self._host_origin = time.perf_counter()

    def steps(self) -> list[Step]:
        """Every recorded step (after the device has finished), in device order."""
        self.cuda.synchronize()

        def device(a: Any, b: Any) -> tuple[float, float] | None:
            if a is None:
                return None
            at = self.cuda.event_elapsed_time
            return (round(at(self._origin, a), 3), round(at(self._origin, b), 3))

        def host(a: float, b: float) -> tuple[float, float] | None:
            return (round(1e3 * (a - self._host_origin), 3), round(1e3 * (b - self._host_origin), 3)) if a else None

        steps = [Step(k, name, device(a, b), host(h, h1)) for k, name, a, b, h, h1 in self._raw]
        return sorted(steps, key=lambda s: (s.device_ms or s.host_ms or (0.0, 0.0))[0])


def summary(steps: list[Step]) -> dict[str, float]:
    """Mean device ms per step, the copy in counted apart from pass 1, and the gaps between passes 2."""
    by = {(s.batch, s.name): s for s in steps}
    batches = sorted({s.batch for s in steps})

    def length(name: str, k: int) -> float | None:
        step = by.get((k, name))
        return None if step is None or step.device_ms is None else step.device_ms[1] - step.device_ms[0]

    def mean(values: list[float | None]) -> float:
        known = [v for v in values if v is not None]
        return round(sum(known) / len(known), 3) if known else 0.0

    pass2 = [by[(k, "pass2")].device_ms for k in batches if (k, "pass2") in by]
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(pass2) if a and b]
    waits = ("wait_pass1", "wait_pass2")
    host_waits = {name: mean([_host_length(by.get((k, name))) for k in batches]) for name in waits}
    return {
        "copy_in_ms": mean([length("copy_in", k) for k in batches]),
        "pass1_with_copy_in_ms": mean([length("pass1", k) for k in batches]),
        "pass2_ms": mean([length("pass2", k) for k in batches]),
        "pass2_kernels_ms": mean([length("pass2_kernels", k) for k in batches]),
        "gap_between_passes_2_ms": mean(list(gaps)),
        **{f"host_{name}_ms": v for name, v in host_waits.items()},
    }


def _host_length(step: Step | None) -> float | None:
    return None if step is None or step.host_ms is None else step.host_ms[1] - step.host_ms[0]


def _raw_batches(args: argparse.Namespace) -> list[Any]:
    """The batches to stream: generated bodies, or the first ``--records`` of the harness's corpus."""
    if args.corpus_in is None:
        return corpus_batches(args.records, args.batch_size, 7, args.body_bytes)[1]
    values = corpus.read(args.corpus_in, limit=args.records).values
    return batches(values, args.batch_size)


def main(argv: list[str] | None = None) -> int:
    """Stream generated packed batches through the device lane with the timeline on; print and write it."""
    p = argparse.ArgumentParser(prog="python -m bench.lane_timeline", description=__doc__)
    p.add_argument("--records", type=int, default=1_200_000)
    p.add_argument("--batch-size", type=int, default=100_000)
    p.add_argument("--body-bytes", type=int, default=1024)
    p.add_argument("--serial", action="store_true", help="one batch at a time, nothing overlapped")
    p.add_argument(
        "--corpus-in",
        type=Path,
        default=None,
        help="the harness's corpus file (python -m bench --corpus-out) instead of generated bodies",
    )
    add_lane_knobs(p)
    p.add_argument("--lane-order", choices=LANE_ORDERS, default=None,
                   help="which body each thread of pass 1 takes (default: the lane's)")  # fmt: skip
    p.add_argument("--gpu-pool-bytes", type=int, default=None, help="GPU memory pool cap (default: the worker's)")
    p.add_argument("--out", type=Path, default=None, help="write the steps and the summary as JSON here")
    args = p.parse_args(argv)
    backend: Any = make_backend("gpu", args.gpu_pool_bytes, lane=lane_knobs(args))
    if args.lane_order is not None:
        backend.lane.executor.lane_order = args.lane_order
    timeline = Timeline(backend.lane.executor)
    raws = _raw_batches(args)
    packed = [PackedBatch.of(raw, backend.input_buffer) for raw in raws]
    for warm in backend.parse_stream(packed[:3], overlap=not args.serial):
        del warm
    timeline.start()
    started = time.perf_counter()
    for result in backend.parse_stream(packed, overlap=not args.serial):
        del result
    timeline.cuda.synchronize()
    seconds = time.perf_counter() - started
    steps = timeline.steps()
    result = {
        "records": args.records, "batch_size": args.batch_size, "overlap": not args.serial,
        "corpus": str(args.corpus_in or "generated"),
        **lane_knob_values(backend.lane.executor), "lane_order": backend.lane.executor.lane_order,
        "records_per_s_with_timeline": round(args.records / seconds), "summary": summary(steps),
        "kernels": backend.lane.executor.kernel_resources(), "steps": [asdict(s) for s in steps],
    }  # fmt: skip
    for s in steps:
        print(f"b{s.batch:02d} {s.name:10s} device {s.device_ms} host {s.host_ms}")
    print(json.dumps({k: v for k, v in result.items() if k != "steps"}))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
