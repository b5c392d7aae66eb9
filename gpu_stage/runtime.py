"""Process-wide tuning for a batch-parsing process (the worker and the benchmarks call it once)."""

from __future__ import annotations

import logging
import os
import time

from gpu_stage import synth
from gpu_stage.transform.api import Backend
from llmpipe import runtime

log = logging.getLogger(__name__)

GEN0_THRESHOLD = 200_000
# Batch buffers (values, encoded rows) up to this size are reused instead of mapped afresh.
HEAP_BUFFER_BYTES = 1 << 30


def tune_gc() -> None:
    """Collect cyclic garbage far less often, and never scan what start-up allocated.

    Parsing a batch allocates millions of short-lived, acyclic objects (decoded dicts, strings, row
    tuples); with CPython's default generation-0 threshold of 700 the collector runs thousands of
    times per batch and rescans survivors. Freezing start-up objects and raising the threshold made
    the CPU backend 15-20 % faster on 20,000 ~1 KB bodies; memory stays bounded because reference
    counting frees the acyclic objects at once.
    """
    runtime.tune_gc(GEN0_THRESHOLD)


def tune_process() -> None:
    """:func:`tune_gc`, and batch-sized buffers kept on the heap (``llmpipe.runtime.keep_large_buffers``)."""
    tune_gc()
    runtime.keep_large_buffers(HEAP_BUFFER_BYTES)


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. under ``taskset`` or a cgroup)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def warm_up(backend: Backend, records: int) -> float:
    """Parse a generated batch of ``records`` bodies twice and drop the results; the seconds it took.

    A backend's first batches pay for what it does once: the device lane loads its kernels (from
    the kernel cache, or compiles them) and allocates its device and page-locked buffers, which grow
    to the largest batch seen; its kernels' first launches go through numba's dispatcher. Paid
    while the first real records wait, that is the tail of a worker's first seconds. The second
    parse finds everything in place and takes the steady path. Lane counts and stage timings the
    backend keeps are reset afterwards, so they describe real batches only.
    """
    if records <= 0:
        return 0.0
    started = time.perf_counter()
    batch = synth.batch(synth.bodies(records))
    for _ in range(2):
        backend.parse(batch)
    reset_counters(backend)
    seconds = time.perf_counter() - started
    log.info("%s backend warmed up on %d generated records in %.2fs", backend.name, records, seconds)
    return seconds


def backend_stages(backend: object) -> dict[str, float]:
    """Seconds per stage the backend timed since its warm-up (the GPU backend's ``clock``); empty for others.

    Where a GPU worker's parse step goes (packing, waiting for each pass, the native core's share,
    merging) is told by these, not by the worker's own steps.
    """
    clock = getattr(backend, "clock", None)
    seconds = getattr(clock, "seconds", None)
    return dict(seconds) if isinstance(seconds, dict) else {}


def reset_counters(backend: object) -> None:
    """Forget a warm-up's stage times and lane counts, for backends that keep them (``reset_counters``)."""
    reset = getattr(backend, "reset_counters", None)
    if callable(reset):
        reset()
