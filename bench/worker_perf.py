"""``bench.e2e_worker --perf-worker PERF``: Linux ``perf`` on worker 0, native code and every thread.

py-spy (``--profile-worker``) sees the Python frames; most of a worker's CPU is in native code, on
threads Python does not know (librdkafka's, the native core's, the driver's). ``perf`` samples those
with call graphs (DWARF unwinding: the native core and librdkafka keep no frame pointers). The data
stays in the run's log folder; a text report by thread, then by thread and symbol with each symbol's
callers, is written next to it once the run is over, so a host that cannot return the data file still
returns what it says.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

PERF_DATA = "worker-0.perf.data"
PERF_REPORT = "worker-0.perf.txt"
PERF_LOG = "perf.log"
RATE_HZ = 499
"""Samples per second and thread: worker 0's few seconds give some thousands, and the data file stays
in the hundreds of megabytes even with 16 KiB of stack per sample."""
STACK_BYTES = 16384
REPORTS = (("pid", "none"), ("pid,dso,sym", "caller,1,callee,function,percent"))
"""The report's sections: (``--sort`` keys, ``-g`` call-graph spec); the second lists each symbol's
callers that carry at least 1 % of its samples."""


def record_command(perf: str, pid: int, logs: Path) -> list[str]:
    """``perf record`` of process ``pid`` until it exits, into ``logs``."""
    return [perf, "record", "-F", str(RATE_HZ), "--call-graph", f"dwarf,{STACK_BYTES}", "-p", str(pid),
            "-o", str(logs / PERF_DATA)]  # fmt: skip


def start(perf: str, pid: int, logs: Path) -> subprocess.Popen[bytes]:
    """``perf`` recording process ``pid`` from now; its own output goes to ``logs/perf.log``."""
    with open(logs / PERF_LOG, "wb") as out:
        return subprocess.Popen(record_command(perf, pid, logs), stdout=out, stderr=subprocess.STDOUT)


def report(perf: str, logs: Path, timeout_s: float = 600.0) -> Path:
    """Write the text report of the recorded data (``REPORTS``, one section after the other); its path."""
    path = logs / PERF_REPORT
    with open(path, "w", encoding="utf-8") as out:
        for sort, graph in REPORTS:
            out.write(f"## perf report --sort {sort} -g {graph}\n")
            out.flush()
            subprocess.run([perf, "report", "-i", str(logs / PERF_DATA), "--no-children", "--sort", sort,
                            "-g", graph, "--stdio"], stdout=out, stderr=subprocess.DEVNULL, check=False,
                           timeout=timeout_s)  # fmt: skip
    return path
