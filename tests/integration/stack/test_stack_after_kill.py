"""``python -m stack up`` right after the broker was SIGKILLed starts a new broker instead of trusting the PID file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stack import broker, procs

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]


def _stack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stack", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_up_after_sigkill_starts_a_new_broker(tmp_path: Path) -> None:
    folder = tmp_path / "stack"
    common = ("--dir", str(folder), "--port", str(procs.free_port()), "--topics", "")
    try:
        assert _stack("up", *common).returncode == 0
        run = broker.BrokerDir(folder)
        old = run.pid()
        assert old is not None
        os.kill(old, signal.SIGKILL)
        time.sleep(0.5)
        assert run.pid() is None  # the PID file is still there, the broker is not
        started = time.monotonic()
        again = _stack("up", *common)
        assert again.returncode == 0, again.stderr[-2000:]
        assert time.monotonic() - started < 60
        assert run.pid() not in {None, old}
        assert _stack("status", "--dir", str(folder)).returncode == 0
    finally:
        broker.stop(folder)
