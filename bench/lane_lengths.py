"""Pass 1 of the device lane compiled for this CPU, per body, by body length: a proxy for the walk's work.

The CPU build runs the same walk as the device, one body after another, so a change that walks a
body's bytes fewer times shows here before it is measured on a GPU (where divergence and memory
latency, not the CPU's, set the time). Not a device figure: compare two trees on one machine, each
from its own checkout. Each length class is measured whole, best of ``--repeats``.

    python -m bench.lane_lengths --records 20000 --out FILE
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

from bench import corpora
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.batch import RawBatch

EDGES = (0, 512, 1024, 2048, 4096, 8192, 16384, 1 << 40)
"""Body length classes, in bytes: each holds the bodies longer than one edge and at most the next."""


def measure(values: list[bytes], repeats: int) -> list[dict[str, Any]]:
    """Each length class's bodies through pass 1 (``LaneTransform.measure``): µs per body and ns per byte."""
    from gpu_stage.transform.device.executor import CpuExecutor
    from gpu_stage.transform.device.lane import LaneTransform

    lane = LaneTransform(TransformSettings(max_record_bytes=1 << 20), CpuExecutor)
    lane.measure(RawBatch.of_values(values[:100]))  # compiles (or loads) the lane
    rows = []
    for low, high in itertools.pairwise(EDGES):
        chosen = [v for v in values if low < len(v) <= high]
        if not chosen:
            continue
        batch, size = RawBatch.of_values(chosen), sum(map(len, chosen))
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            lane.measure(batch)
            best = min(best, time.perf_counter() - start)
        rows.append({
            "above": low, "up_to": high, "bodies": len(chosen), "mean_bytes": round(size / len(chosen)),
            "us_per_body": round(best / len(chosen) * 1e6, 2), "ns_per_byte": round(best / size * 1e9, 2),
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    """Print the table and write it with the corpus's description."""
    p = argparse.ArgumentParser(prog="python -m bench.lane_lengths", description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=20_000)
    corpora.add_options(p)
    p.add_argument("--repeats", type=int, default=3, help="runs of each class; the fastest counts")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    corpora.check(p, args)
    made = corpora.load(args, args.records)
    rows = measure(made.values, args.repeats)
    for row in rows:
        print(f"{row['above']:>6}-{row['up_to']:<14} {row['bodies']:>7} bodies  mean {row['mean_bytes']:>6} B  "
              f"{row['us_per_body']:>8.2f} us/body  {row['ns_per_byte']:>6.2f} ns/byte")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"corpus": made.config, "classes": rows}, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
