"""A broker PID file is believed only while its process is alive and is that folder's broker."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from stack.broker import BrokerDir, is_broker
from stack.procs import command_line


def _pretend(config: Path) -> subprocess.Popen[bytes]:
    """A process whose command line reads like a broker started with ``config`` (once it has exec-ed)."""
    code = "import time; time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, "kafka.Kafka", str(config)])
    deadline = time.monotonic() + 10
    while b"kafka.Kafka" not in command_line(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)  # between fork and exec the child still has this test's command line
    return proc


def test_live_broker_command_line_is_recognised_then_not_once_killed(tmp_path: Path) -> None:
    run = BrokerDir(tmp_path)
    config = tmp_path / "server.properties"
    proc = _pretend(config)
    try:
        run.pid_file.write_text(str(proc.pid))
        assert is_broker(proc.pid, config) and run.pid() == proc.pid
        assert not is_broker(proc.pid, tmp_path / "other" / "server.properties")
        proc.kill()
        subprocess.run(["sleep", "0.2"], check=True)
        assert run.pid() is None  # a zombie (not yet reaped) is no broker
    finally:
        proc.kill()
        proc.wait()
    assert run.pid() is None


def test_pid_of_another_program_or_garbage_is_no_broker(tmp_path: Path) -> None:
    run = BrokerDir(tmp_path)
    with subprocess.Popen(["sleep", "30"]) as other:
        run.pid_file.write_text(str(other.pid))
        assert run.pid() is None
        other.kill()
    run.pid_file.write_text("not a pid")
    assert run.pid() is None
