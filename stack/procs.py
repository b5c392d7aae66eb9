"""What the local stack's launchers share about the processes they start: ports, PID files, liveness.

Each launcher records the PID of what it started and stops only that process. A PID file alone proves
nothing (a killed process leaves it behind, and the number can belong to another process since, or to
a zombie not yet reaped), so every check also asks ``/proc`` whether the process is alive and is the one
started for that folder.
"""

from __future__ import annotations

import socket
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def recorded_pid(pid_file: Path) -> int | None:
    """The PID written in ``pid_file``; None when there is none (or it is not a number)."""
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    """True when ``pid`` exists and is neither a zombie nor exiting."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in {"Z", "X"}


def command_line(pid: int) -> list[bytes]:
    """The arguments ``pid`` was started with (empty when it is gone)."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return []
