"""What the end-to-end runs read from the workers' logs: each worker's summary line, CPU and batch steps.

Separate from the driver (:mod:`bench.e2e_worker`) so the parsing is tested on log text alone.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

from bench.machine import CpuWindow

SUMMARY = re.compile(r"summary: in=(\d+) typed=(\d+) dlq=(\d+) batches=(\d+) aborts=(\d+) "
                     r"first_input_at=([\d.]+) last_commit_at=([\d.]+) busy_rate=(\d+)")
BUSY_CPU = re.compile(r"busy_cpu=([\d.]+) us/rec")
BY_THREAD = re.compile(r"cpu_us_per_record_by_thread: (.*)$", re.MULTILINE)
THREAD_PREFIX = "thread_us:"
BACKEND_STAGES = re.compile(r"backend_ms_per_batch: (.*?) cpu_us_per_record_by_thread:")
BACKEND_PREFIX = "backend_ms:"
STEPS = re.compile(
    r"per_batch_ms: collect=([\d.]+) parse=([\d.]+) produce=([\d.]+) commit=([\d.]+) wait=([\d.]+)"
    r"(?: starved=([\d.]+))?"
)
STEP_KEYS = ("collect_ms", "parse_ms", "produce_ms", "commit_ms", "wait_ms", "starved_ms")


def summaries(logs: Path, workers: int) -> list[dict[str, float]]:
    """Each worker's closing summary line, parsed (with its mean milliseconds per batch step)."""
    keys = ("in", "typed", "dlq", "batches", "aborts", "first_input_at", "last_commit_at", "busy_rate")
    out = []
    for k in range(workers):
        text = (logs / f"worker-{k}.log").read_text(errors="replace")
        found = SUMMARY.findall(text)
        if not found:
            msg = f"worker {k} wrote no summary line; see {logs / f'worker-{k}.log'}"
            raise SystemExit(msg)
        worker = dict(zip(keys, map(float, found[-1]), strict=True))
        for per_batch in STEPS.findall(text)[-1:]:  # a worker before ``starved`` leaves it out
            worker.update((step, float(ms)) for step, ms in zip(STEP_KEYS, per_batch, strict=True) if ms)
        for cpu in BUSY_CPU.findall(text)[-1:]:
            worker["cpu_us_per_record"] = float(cpu)
        for by_thread in BY_THREAD.findall(text)[-1:]:
            worker.update(_pairs(by_thread, THREAD_PREFIX))
        for stages in BACKEND_STAGES.findall(text)[-1:]:  # the backend's own stages, per batch
            worker.update(_pairs(stages, BACKEND_PREFIX))
        out.append(worker)
    return out


def _pairs(text: str, prefix: str) -> list[tuple[str, float]]:
    """``name=value`` pairs of a summary line's part, each name with ``prefix``."""
    return [(prefix + name, float(value)) for name, value in (pair.split("=") for pair in text.split() if "=" in pair)]


def cpu_figures(cpu: CpuWindow, per_worker: list[dict[str, float]], records: int) -> dict[str, Any]:
    """Where the host's CPU went over a run: busy cores, the broker's and the workers' CPU per record.

    The window runs from the moment the input is released to the workers' stop, so it holds the busy
    span and the wait for the last commit to be seen; the broker's figure is over that window.
    """
    with_cpu = [w for w in per_worker if "cpu_us_per_record" in w and w["in"] > 0]
    workers_us = sum(w["cpu_us_per_record"] * w["in"] for w in with_cpu) / max(sum(w["in"] for w in with_cpu), 1)
    broker_us = cpu.process_seconds * 1e6 / records if cpu.process_seconds is not None and records else None
    return {
        "host_busy_cores": cpu.busy_cores,
        "broker_cpu_us_per_record": None if broker_us is None else round(broker_us, 2),
        "workers_cpu_us_per_record": round(workers_us, 2) if with_cpu else None,
        "workers_cpu_us_per_record_by_thread": by_thread(per_worker),
    }


def by_thread(per_worker: list[dict[str, float]]) -> dict[str, float]:
    """The workers' CPU µs per record of each thread group, weighted by their records, largest first.

    Workers whose summary has no breakdown (or no records) are left out of the weighting.
    """
    with_threads = [w for w in per_worker if w["in"] > 0 and any(k.startswith(THREAD_PREFIX) for k in w)]
    records = sum(w["in"] for w in with_threads)
    groups = {key for w in with_threads for key in w if key.startswith(THREAD_PREFIX)}
    spent = {key.removeprefix(THREAD_PREFIX): sum(w.get(key, 0.0) * w["in"] for w in with_threads) / max(records, 1)
             for key in groups}  # fmt: skip
    return {name: round(us, 2) for name, us in sorted(spent.items(), key=lambda item: -item[1])}


def mean_steps(per_worker: list[dict[str, float]]) -> dict[str, float]:
    """Each batch step's milliseconds (``collect_ms`` …) averaged over the workers that report it."""
    names = [key for key in STEP_KEYS if any(key in worker for worker in per_worker)]
    return {name.removesuffix("_ms"): _mean_of(per_worker, name) for name in names}


def mean_backend_stages(per_worker: list[dict[str, float]]) -> dict[str, float]:
    """Each backend stage's milliseconds per batch (``backend_ms:…``) averaged over the workers that report it."""
    names = dict.fromkeys(key for worker in per_worker for key in worker if key.startswith(BACKEND_PREFIX))
    return {name.removeprefix(BACKEND_PREFIX): _mean_of(per_worker, name) for name in names}


def _mean_of(per_worker: list[dict[str, float]], name: str) -> float:
    """``name``'s value averaged over the workers that report it, to 0.1."""
    return round(statistics.fmean(w[name] for w in per_worker if name in w), 1)
