"""Facts about the host a result came from, so figures from two machines are never read as one."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
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
