"""What joining a batch's consume calls costs the worker's main thread, into fresh arrays or a pooled buffer.

``python -m bench.batch_join --records 20000 --calls 2 --out bench/results/batch-join-vm.json`` packs
real-shaped bodies (with the connector's seven headers) as ``--calls`` consume calls would return
them, then joins them into one batch ``--batches`` times, each batch held until the next one is
made, as the worker holds a batch until its commit settles: column by column into fresh arrays
(``PackedRecords.columns``, the worker's way before; the baseline), and straight into the native
backend's pooled input buffer (``PackedBatch.joined``, the worker's way now). The worker's allocator
settings apply (``tune_process``): under them, fresh arrays reuse the heap instead of being faulted
in anew. Best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import real_corpus
from bench.e2e_worker import HEADERS
from bench.transform import write_result
from gpu_stage.runtime import tune_process
from gpu_stage.transform import NativeBackend, PackedBatch, TransformSettings
from gpu_stage.transform.batch import RawBatch
from llmpipe.kafka_io import PackedColumns, PackedRecords


def consumed(records: int, calls: int, seed: int) -> PackedRecords:
    """``records`` real-shaped raw records as ``calls`` consume calls' columns."""
    values = real_corpus.generate(records, seed=seed).values
    per_call = -(-records // calls)
    parts = []
    for first in range(0, records, per_call):
        rows = range(first, min(first + per_call, records))
        raw = RawBatch(values=[values[i] for i in rows], keys=[f"req-{i:09d}".encode() for i in rows],
                       headers=[HEADERS] * len(rows), topic="llm.raw", partitions=[i % 2 for i in rows],
                       offsets=list(rows), timestamps_ms=[1_700_000_000_000 + i for i in rows])  # fmt: skip
        parts.append(PackedColumns(*PackedBatch.of(raw).columns()))  # type: ignore[arg-type]
    return PackedRecords("llm.raw", parts)


def timed(join: Callable[[], PackedBatch], batches: int) -> tuple[float, float]:
    """Wall and CPU seconds per batch of ``batches`` joins, each batch held until the next is made."""
    held: list[PackedBatch | None] = [None, None]
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(batches):
        held[i % 2] = join()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return wall / batches, cpu / batches


def measure(records: int, calls: int, batches: int, rounds: int, seed: int) -> dict[str, Any]:
    """Best µs per record of each way of joining, and the pooled way's ratio to fresh arrays."""
    records_in = consumed(records, calls, seed)
    native = NativeBackend(TransformSettings())
    pieces = [part.columns() for part in records_in.parts]
    ways: dict[str, Callable[[], PackedBatch]] = {
        "fresh_arrays": lambda: PackedBatch("llm.raw", *records_in.columns().columns()),  # type: ignore[arg-type]
        "pooled_buffer": lambda: PackedBatch.joined("llm.raw", pieces, native.input_buffer),
    }
    want = ways["fresh_arrays"]()
    for name, join in ways.items():  # both hold the same records
        got = join()
        assert [bytes(a) for a in got.columns()][1:] == [bytes(a) for a in want.columns()][1:], name
        assert bytes(got.value_buf[: got.value_bytes]) == bytes(want.value_buf[: want.value_bytes]), name
    best = {name: (float("inf"), float("inf")) for name in ways}
    for _ in range(rounds):
        for name, join in ways.items():
            wall, cpu = timed(join, batches)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    figures = {f"{name}_us_per_record": round(best[name][1] * 1e6 / records, 3) for name in ways}
    return {
        "records": records, "calls": calls, "batches": batches, "rounds": rounds, "corpus": "real",
        "value_bytes": want.value_bytes, "headers_per_record": len(HEADERS), **figures,
        **{f"{name}_ms_per_batch": round(best[name][0] * 1e3, 3) for name in ways},
        "baseline": "fresh_arrays",
        "ratio": round(figures["pooled_buffer_us_per_record"] / figures["fresh_arrays_us_per_record"], 3),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: print the figures, write them as JSON with ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=20_000, help="records per batch")
    parser.add_argument("--calls", type=int, default=2, help="consume calls per batch")
    parser.add_argument("--batches", type=int, default=30, help="batches joined per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=20250301)
    parser.add_argument("--out", type=Path, default=None, help="write the result JSON here")
    args = parser.parse_args(argv)
    if min(args.records, args.calls, args.batches, args.rounds) < 1:
        parser.error("--records, --calls, --batches and --rounds: at least 1")
    tune_process()
    r = measure(args.records, args.calls, args.batches, args.rounds, args.seed)
    sys.stdout.write(
        f"joining {r['calls']} consume calls into a batch of {r['records']} records, CPU per record: fresh arrays "
        f"{r['fresh_arrays_us_per_record']} µs, the pooled input buffer {r['pooled_buffer_us_per_record']} µs "
        f"({r['ratio']}x), best of {r['rounds']}\n"
    )
    write_result(args.out, r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
