"""Batch-size sweep of the transform per backend, with the GPU backend's time split by stage.

``python -m bench.stages --sizes 1000:20000,10000:100000 --backends gpu,cpu --out x.json``
runs each ``batch:records`` pair on the same deterministic bodies (:mod:`gpu_stage.synth`): records/s
and per-batch latency of plain runs, then for the GPU backend a second run that waits for the device
at every stage edge, so its per-stage seconds (screen, join, copy in, reads, mask, columns to host,
assemble, slow lane, encode) say which stage bounds the rate. Output checksums of the backends are
compared per size. ``--host-path 10000`` adds, for those batch sizes, a GPU run of the earlier path
(pre-screen per body on the host, cuDF reading host bytes) for comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.transform import write_result
from gpu_stage.runtime import reset_counters
from gpu_stage.synth import SynthConfig, batch, bodies
from gpu_stage.transform import Backend, RawBatch, TransformSettings
from gpu_stage.transform import backends as select
from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """``"1000:20000,10000:100000"`` → ``[(1000, 20000), (10000, 100000)]`` (batch size, records)."""
    out = []
    for part in text.split(","):
        size, _, records = part.partition(":")
        try:
            out.append((int(size), int(records or size)))
        except ValueError as exc:
            msg = f"bad size {part!r}: want BATCH:RECORDS"
            raise ConfigError(msg) from exc
    return out


WARM_UP_RECORDS = 2000


def timed_pass(backend: Backend, batches: list[RawBatch], warm_up: RawBatch) -> dict[str, Any]:
    """Parse each batch once after an untimed warm-up batch; rate, latency and a checksum.

    The warm-up is a small batch of its own (first-call costs: kernel compilation, reader set-up),
    so a sweep up to 1M-record batches does not pay a whole extra batch per pass.
    """
    backend.parse(warm_up)
    reset_counters(backend)
    digest = hashlib.sha256()
    seconds: list[float] = []
    records = good = 0
    for raw in batches:
        start = time.perf_counter()
        result = backend.parse(raw)
        seconds.append(time.perf_counter() - start)
        digest.update(result.encoded.buf)
        records += len(raw)
        good += len(result.encoded)
    total = sum(seconds)
    return {
        "records": records,
        "good": good,
        "seconds": round(total, 4),
        "records_per_s": round(records / total, 1) if total else None,
        "batch_ms_median": round(1000 * statistics.median(seconds), 3),
        "batch_ms_max": round(1000 * max(seconds), 3),
        "output_sha256": digest.hexdigest(),
    }


def gpu_passes(
    backend: Any, batches: list[RawBatch], warm_up: RawBatch, *, host_path: bool, profile: bool
) -> dict[str, Any]:
    """Plain pass, profiled pass (stage seconds and µs per record), optionally the earlier path's pass."""
    plain = timed_pass(backend, batches, warm_up)
    path = backend.cudf_path
    plain["screen"] = "none (device lane)" if path is None else "device" if path.device_screen is not None else "host"
    plain["slow_lane_fraction"] = round(backend.stats.slow_fraction, 4)
    plain["whole_batch_fallbacks"] = backend.stats.slow_batches
    plain["unsynced_stage_seconds"] = backend.clock.rounded()
    if not profile:
        return plain
    backend.set_profile(True)
    profiled = timed_pass(backend, batches, warm_up)
    backend.set_profile(False)
    stages = backend.clock.rounded()
    n = profiled["records"]
    plain["profiled_records_per_s"] = profiled["records_per_s"]
    plain["stage_seconds"] = stages
    plain["stage_us_per_record"] = {k: round(1e6 * v / n, 3) for k, v in stages.items()}
    if host_path and path is not None:
        saved = path.pinned_stage, path.device_screen
        path.pinned_stage = path.device_screen = None
        host = timed_pass(backend, batches, warm_up)
        path.pinned_stage, path.device_screen = saved
        plain["host_path"] = {k: host[k] for k in ("records_per_s", "batch_ms_median", "output_sha256")}
    return plain


def sweep(
    sizes: list[tuple[int, int]], names: list[str], seed: int, host_path: set[int], profile_max: int
) -> dict[str, Any]:
    """Every backend over every size; bodies generated once for the largest record count."""
    values = bodies(max(r for _, r in sizes), SynthConfig(seed=seed))
    backends: dict[str, Any] = {}
    for name in names:
        backends[name] = select.by_name(name, TransformSettings(), pool_bytes=48 << 30)
    warm_up = batch(values[:WARM_UP_RECORDS])
    rows = []
    for size, records in sizes:
        chunk = values[:records]
        batches = [batch(chunk[i : i + size], first_offset=i) for i in range(0, records, size)]
        row: dict[str, Any] = {"batch_size": size, "records": records, "input_bytes": sum(map(len, chunk))}
        for name, backend in backends.items():
            start = time.perf_counter()
            if name == "gpu":
                profile = size <= profile_max
                row[name] = gpu_passes(backend, batches, warm_up, host_path=size in host_path, profile=profile)
            else:
                row[name] = timed_pass(backend, batches, warm_up)
            rate, took = row[name]["records_per_s"], time.perf_counter() - start
            log.info("%s batch %d: %s rec/s (%.1f s)", name, size, rate, took)
        digests = {row[name]["output_sha256"] for name in backends}
        row["identical"] = len(digests) == 1
        rows.append(row)
    return {
        "seed": seed, "sizes": rows, "host": platform.node(), "cpus": os.cpu_count(),
        "python": platform.python_version(), "machine": platform.machine(),
    }  # fmt: skip


def table(result: dict[str, Any]) -> str:
    """A short text table: records/s per backend and batch size, then the GPU stage split."""
    lines = []
    for row in result["sizes"]:
        rates = "  ".join(f"{k}={row[k]['records_per_s']}" for k in ("gpu", "cpu", "reference") if k in row)
        if "host_path" in row.get("gpu", {}):
            rates += f"  gpu_host_path={row['gpu']['host_path']['records_per_s']}"
        lines.append(f"batch {row['batch_size']:>8}: {rates}  identical={row['identical']}")
        if "stage_us_per_record" in row.get("gpu", {}):
            split = ", ".join(f"{k} {v}" for k, v in row["gpu"]["stage_us_per_record"].items())
            lines.append(f"    gpu µs/record: {split}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1000:20000,10000:100000,100000:200000")
    parser.add_argument("--backends", default="gpu,cpu")
    parser.add_argument("--seed", type=int, default=SynthConfig.seed)
    parser.add_argument("--host-path", default="", help="batch sizes that also time the earlier GPU path")
    parser.add_argument("--profile-max", type=int, default=1 << 62, help="largest batch size given a profiled pass")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host_path = {int(size) for size in args.host_path.split(",") if size}
    result = sweep(parse_sizes(args.sizes), args.backends.split(","), args.seed, host_path, args.profile_max)
    sys.stdout.write(table(result))
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
