"""Facts about the host a result came from, so figures from two machines are never read as one."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from gpu_stage.runtime import usable_cores


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str | None:
    """The first GPU's name and memory from ``nvidia-smi``, or None without one."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def facts() -> dict[str, Any]:
    """Host, cores, CPU model, GPU, Python and library versions."""
    import msgspec
    import numpy
    import orjson

    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "usable_cores": usable_cores(),
        "cpu_model": cpu_model(),
        "gpu": gpu_name(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "numpy": numpy.__version__,
        "orjson": orjson.__version__,
        "msgspec": msgspec.__version__,
        "load_avg_at_start": _load(),
    }


def unwritten_mb() -> float | None:
    """Page-cache data not yet on disk (Dirty plus Writeback of /proc/meminfo), in MB; None without it."""
    try:
        lines = Path("/proc/meminfo").read_text(encoding="utf-8").splitlines()
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        kb = sum(int(fields[name].split()[0]) for name in ("Dirty", "Writeback"))
    except (OSError, KeyError, ValueError, IndexError):
        return None
    return round(kb / 1024, 1)


def write_back() -> float:
    """Write every dirty page of the host back to disk (``sync``); the seconds it took."""
    started = time.perf_counter()
    os.sync()
    return time.perf_counter() - started


def _host_jiffies() -> tuple[int, int]:
    """All and idle (idle + iowait) jiffies of every core since boot, from /proc/stat."""
    fields = Path("/proc/stat").read_text(encoding="utf-8").splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    return sum(ticks[:8]), ticks[3] + ticks[4]


def _process_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` (all its threads), from /proc/PID/stat."""
    after_name = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")


class CpuWindow:
    """The host's busy cores and one process's CPU seconds between :meth:`start` and :meth:`stop` (Linux).

    What an end-to-end run needs to say whether the host's cores were the bound, and what a broker
    on the same host cost per record. Without /proc (or when the process is gone) the figures are None.
    """

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid
        self._host: tuple[int, int] | None = None
        self._process: float | None = None
        self.busy_cores: float | None = None
        """Average number of cores not idle over the window."""
        self.process_seconds: float | None = None
        """CPU seconds the process spent over the window."""

    def start(self) -> None:
        """Take the first reading."""
        try:
            self._host = _host_jiffies()
            self._process = _process_seconds(self.pid) if self.pid else None
        except (OSError, ValueError, IndexError):
            self._host = self._process = None

    def stop(self) -> None:
        """Take the second reading and fill the figures."""
        try:
            host = _host_jiffies()
            process = _process_seconds(self.pid) if self.pid else None
        except (OSError, ValueError, IndexError):
            return
        if self._host is not None:
            all_ticks, idle_ticks = host[0] - self._host[0], host[1] - self._host[1]
            cores = os.cpu_count() or 1
            self.busy_cores = round(cores * (all_ticks - idle_ticks) / all_ticks, 2) if all_ticks else None
        if process is not None and self._process is not None:
            self.process_seconds = round(process - self._process, 3)
