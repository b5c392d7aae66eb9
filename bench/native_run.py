"""``python -m bench.native_run``: the device lane's native-core rows while the feeding thread is busy.

The device lane hands the rows it does not take (1.34 % of the harness's 1 KB corpus) to the native
core, which works on them while the feeding thread queues the next batch, then the feeding thread
waits for their result. This times those rows of one 100 k batch, with the feeding thread's part
played by a loop of Python code: the call alone; on a Python thread (it needs the GIL to start and
to return, and a thread running Python code holds it for up to the switch interval); on a native
thread (``NativeBackend.start_packed``); and the wait for that result asked for 0, 1 and 2 ms after
the start, while the asking thread transforms the chunks not yet taken. Needs no GPU (pass 1 runs
compiled for the CPU to find the rows); not a test, and its times depend on the machine.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench import corpus
from bench.transform import write_result
from gpu_stage.synth import batch
from gpu_stage.transform import NativeBackend, PackedBatch, TransformSettings
from gpu_stage.transform.device import NOT_TAKEN, CpuExecutor, LaneTransform
from llmpipe.runtime import configure_logging

log = logging.getLogger("bench.native_run")


def _busy(seconds: float) -> None:
    """Run Python code (as the feeding thread does between the native call's start and its result)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e3, 3)


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure(
    native: NativeBackend, packed: PackedBatch, rows: npt.NDArray[np.int64], rounds: int, busy_s: float
) -> dict[str, Any]:
    """Medians in ms over ``rounds`` of each way to run ``rows`` of ``packed`` (see the module docstring)."""
    pool = ThreadPoolExecutor(max_workers=1)
    on_python: list[float] = []
    on_native: list[float] = []
    for _ in range(rounds):
        future = pool.submit(_timed, lambda: native.run_packed(packed, rows))
        _busy(busy_s)
        on_python.append(future.result())
        run = native.start_packed(packed, rows)
        _busy(busy_s)
        run.result()
        on_native.append(run.seconds)
    pool.shutdown()
    waits = {}
    for ahead_ms in (0, 1, 2):
        samples = []
        for _ in range(rounds):
            run = native.start_packed(packed, rows)
            _busy(ahead_ms / 1e3)
            samples.append(_timed(run.result))
        waits[f"{ahead_ms}_ms_after_start"] = _median_ms(samples)
    return {
        "rows": len(rows),
        "alone_ms": _median_ms([_timed(lambda: native.run_packed(packed, rows)) for _ in range(rounds)]),
        "on_a_python_thread_while_busy_ms": _median_ms(on_python),
        "on_a_native_thread_while_busy_ms": _median_ms(on_native),
        "result_wait_ms": waits,
    }


def main(argv: list[str] | None = None) -> int:
    """Find the rows the lane leaves in one batch of the 1 KB corpus, time them, print and write the JSON."""
    configure_logging("INFO")
    p = argparse.ArgumentParser(prog="python -m bench.native_run", description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=100_000, help="the batch's bodies (~1 KB each)")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--busy-ms", type=float, default=20.0, help="the caller's Python work between start and result")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    settings = TransformSettings(native_threads=1)
    values = corpus.generate(corpus.CorpusConfig(records=args.records, sizes=corpus.parse_sizes("1024:1"))).values
    raw = batch(values)
    rows = np.flatnonzero(LaneTransform(settings, CpuExecutor).measure(raw) == NOT_TAKEN)
    result = measure(NativeBackend(settings), PackedBatch.of(raw), rows, args.rounds, args.busy_ms / 1e3)
    log.info("%d rows left to the native core: %s", result["rows"], result)
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
