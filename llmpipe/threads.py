"""CPU time of this process by thread group, from ``/proc/self/task`` (Linux): where a service's CPU goes.

A worker's CPU per record is spread over its Python threads (the loop, the parse and commit pools)
and librdkafka's own threads (``rdk:broker*`` fetch, compress and send; ``rdk:main`` runs timers and
the transaction state machine). Summing each group's ``utime + stime`` tells which of them bounds a
host's throughput, without a profiler. Elsewhere than Linux the snapshot is empty.
"""

from __future__ import annotations

import os
import re
import threading
from collections import defaultdict
from pathlib import Path

TASKS = Path("/proc/self/task")

_NUMBERED = re.compile(r"[-_:]?\d+$")
"""A trailing thread number (``parse_0``, ``rdk:broker1``, ``rdk:broker-1``), dropped from group names."""


def group_of(python_name: str | None, comm: str) -> str:
    """The group a thread counts in: its Python name (``MainThread`` → ``main``), else its OS name, without numbers.

    Thread-pool threads are named ``<prefix>_<n>``; librdkafka names its threads ``rdk:<role><n>``.
    """
    if python_name == "MainThread":
        return "main"
    name = python_name if python_name is not None else comm
    return _NUMBERED.sub("", name) or "other"


def _ticks(stat: str) -> int:
    """``utime + stime`` of one ``/proc/<pid>/task/<tid>/stat`` line (fields after the parenthesised name)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def cpu_by_group() -> dict[str, float]:
    """CPU seconds each thread group of this process has used so far (threads that ended are not counted)."""
    if not TASKS.is_dir():
        return {}
    python_names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    seconds: dict[str, float] = defaultdict(float)
    for task in os.scandir(TASKS):
        try:
            stat = Path(task.path, "stat").read_text()
        except OSError:  # the thread ended between the listing and the read
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        seconds[group_of(python_names.get(int(task.name)), comm)] += _ticks(stat) / tick
    return dict(seconds)


def per_record_us(before: dict[str, float], after: dict[str, float], records: int) -> dict[str, float]:
    """Each group's CPU µs per record between two snapshots, largest first (groups that used none left out)."""
    if records <= 0:
        return {}
    spent = {name: (after[name] - before.get(name, 0.0)) * 1e6 / records for name in after}
    return dict(sorted(((n, us) for n, us in spent.items() if us > 0), key=lambda item: -item[1]))
