"""Child processes the demo starts, each with its own log file, stopped by the PID we recorded.

Nothing is ever killed by name: the demo shares the machine with other work, so it only signals the
processes it started itself.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llmpipe.errors import ConfigError, SourceError

log = logging.getLogger(__name__)


@dataclass
class Child:
    """One started process and where its output goes."""

    name: str
    proc: subprocess.Popen[bytes]
    log_file: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        """Operating-system id of the process."""
        return self.proc.pid

    def alive(self) -> bool:
        """Still running."""
        return self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        """The end of the log, for error messages."""
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_for_line(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """Block until a log line matches ``pattern``; raise ``SourceError`` if the process dies first."""
        regex = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
            found = regex.search(text)
            if found:
                return found
            if not self.alive():
                msg = f"{self.name} exited with {self.proc.returncode} before '{pattern}':\n{self.tail()}"
                raise SourceError(msg)
            time.sleep(0.1)
        msg = f"{self.name} did not log '{pattern}' within {timeout_s:.0f}s:\n{self.tail()}"
        raise SourceError(msg)


class Children:
    """Every process the demo started; ``stop_all`` ends them newest first."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[Child] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Child:
        """Start ``python -m ...`` style commands with stdout and stderr in ``<log_dir>/<name>.log``."""
        log_file = self.log_dir / f"{name}.log"
        with log_file.open("wb") as out:
            proc = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, **dict(env or {})}, start_new_session=True)
        child = Child(name, proc, log_file)
        self.children.append(child)
        log.info("started %s pid=%d (log %s)", name, proc.pid, log_file)
        return child

    def stop(self, child: Child, timeout_s: float = 30.0) -> int:
        """SIGTERM, wait, then SIGKILL if it will not stop; return the exit code."""
        if child.alive():
            child.proc.send_signal(signal.SIGTERM)
            try:
                child.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s pid=%d ignored SIGTERM for %.0fs: killing it", child.name, child.pid, timeout_s)
                child.proc.kill()
                child.proc.wait()
        return int(child.proc.returncode)

    def wait(self, child: Child, timeout_s: float) -> int:
        """Wait for a process that ends by itself; raise ``ConfigError`` when it overruns."""
        try:
            return int(child.proc.wait(timeout_s))
        except subprocess.TimeoutExpired as exc:
            msg = f"{child.name} did not finish within {timeout_s:.0f}s:\n{child.tail()}"
            raise ConfigError(msg) from exc

    def stop_all(self) -> None:
        """Stop every child still running, newest first."""
        for child in reversed(self.children):
            if child.alive():
                self.stop(child, timeout_s=15.0)
