"""A standalone Flink session cluster (one JobManager, TaskManagers on demand) from the PyFlink wheel.

The ``apache-flink`` wheel carries a full Flink distribution (``bin/``, ``lib/``, ``opt/``, ``conf/``), so
tests and local runs need no separate download. Everything a run writes lives in one run folder:

- ``conf/config.yaml``: free REST/RPC/blob ports, memory sized for a small machine (2 cores), checkpoints and
  savepoints under the folder, checkpoints retained on cancellation (a cancelled job can be resumed);
- ``lib/``: the wheel's ``lib/`` jars plus the connector jars (``stack.jars``), so jobs submitted with
  ``flink run`` find the Kafka connector and Avro without shipping them (``--no-jars``);
- ``log/``, ``pids/``: the daemons' logs and the PID of every process this module started.

The JobManager and TaskManagers run as ``bin/jobmanager.sh start-foreground`` and ``bin/taskmanager.sh
start-foreground`` children (those scripts ``exec`` the JVM, so the recorded PID is the JVM's), and ``stop``
and ``kill_taskmanager`` signal only PIDs recorded here: other clusters on the machine are never touched.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmpipe.errors import ConfigError, PipelineError
from stack.jars import jar_dir
from stack.procs import alive, free_port, recorded_pid

log = logging.getLogger(__name__)

JOBMANAGER = "jobmanager"
TASKMANAGER = "taskmanager"

JM_PROCESS_MB = 1024
TM_PROCESS_MB = 1728
"""The wheel's default TaskManager size: room for a few slots of SQL jobs on a 2-core, 24 GiB machine."""

HEARTBEAT_INTERVAL_MS = 2000
HEARTBEAT_TIMEOUT_MS = 10000
"""A killed TaskManager is noticed within seconds (Flink's defaults, 10 s / 50 s, make recovery tests slow)."""


def flink_home() -> Path:
    """The Flink distribution: ``$FLINK_HOME`` when set, else the one inside the installed PyFlink wheel."""
    env = os.environ.get("FLINK_HOME")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("pyflink")
    if spec is None or spec.origin is None:
        msg = "no Flink distribution: install apache-flink (the [flink] extra) or set FLINK_HOME"
        raise ConfigError(msg)
    home = Path(spec.origin).parent
    if not (home / "bin" / "jobmanager.sh").exists():
        msg = f"{home} has no bin/jobmanager.sh: set FLINK_HOME to a Flink distribution"
        raise ConfigError(msg)
    return home


def flink_cli() -> Path:
    """The distribution's ``bin/flink`` (the CLI ``flink run`` uses)."""
    return flink_home() / "bin" / "flink"


@dataclass(frozen=True)
class FlinkDir:
    """The files of one cluster run: config, lib, logs, PIDs, checkpoints and savepoints."""

    root: Path

    @property
    def conf_dir(self) -> Path:
        """``FLINK_CONF_DIR`` of the daemons (and of a ``flink`` CLI that should talk to this cluster)."""
        return self.root / "conf"

    @property
    def lib_dir(self) -> Path:
        """``FLINK_LIB_DIR``: the distribution's jars plus the connector jars."""
        return self.root / "lib"

    @property
    def log_dir(self) -> Path:
        """``FLINK_LOG_DIR``."""
        return self.root / "log"

    @property
    def pid_dir(self) -> Path:
        """One ``<role>-<n>.pid`` file per process started here."""
        return self.root / "pids"

    @property
    def checkpoint_dir(self) -> Path:
        """``execution.checkpointing.dir``."""
        return self.root / "checkpoints"

    @property
    def savepoint_dir(self) -> Path:
        """``execution.checkpointing.savepoint-dir`` (the default target of a savepoint)."""
        return self.root / "savepoints"

    @property
    def port_file(self) -> Path:
        """REST port of the JobManager."""
        return self.root / "rest.port"

    def rest_port(self) -> int:
        """The recorded REST port."""
        return int(self.port_file.read_text().strip())

    def rest_url(self) -> str:
        """``http://127.0.0.1:<port>`` of the JobManager's REST API."""
        return f"http://127.0.0.1:{self.rest_port()}"

    def jobmanager_address(self) -> str:
        """``127.0.0.1:<port>``, the form ``flink run -m`` takes."""
        return f"127.0.0.1:{self.rest_port()}"

    def pids(self, role: str) -> dict[Path, int]:
        """Live processes of ``role`` started from this folder, by PID file (dead ones are not listed)."""
        found = {}
        for pid_file in sorted(self.pid_dir.glob(f"{role}-*.pid")):
            pid = recorded_pid(pid_file)
            if pid is not None and is_flink_process(pid, self.conf_dir):
                found[pid_file] = pid
        return found

    def jobmanager_pid(self) -> int | None:
        """PID of the running JobManager, if any."""
        pids = list(self.pids(JOBMANAGER).values())
        return pids[0] if pids else None

    def taskmanager_pids(self) -> list[int]:
        """PIDs of the running TaskManagers."""
        return list(self.pids(TASKMANAGER).values())

    def env(self) -> dict[str, str]:
        """Environment for the distribution's scripts (and a ``flink`` CLI) to use this folder."""
        return {**os.environ, "FLINK_CONF_DIR": str(self.conf_dir), "FLINK_LIB_DIR": str(self.lib_dir),
                "FLINK_LOG_DIR": str(self.log_dir), "FLINK_PID_DIR": str(self.pid_dir / "scripts"),
                "FLINK_HOME": str(flink_home())}

    def tail_logs(self, lines: int = 40) -> str:
        """Last lines of every daemon log, for error messages."""
        parts = []
        for path in sorted(self.log_dir.glob("*")):
            if path.suffix in {".log", ".out", ".stdout"} and path.stat().st_size:
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"== {path.name}\n" + "\n".join(text))
        return "\n".join(parts) or "(no Flink logs)"


def is_flink_process(pid: int, conf_dir: Path) -> bool:
    """True when ``pid`` is a live (not zombie) Flink daemon started with ``conf_dir``.

    Checked on the environment, not the command line: it holds ``FLINK_CONF_DIR`` both while the start
    script runs and after it has ``exec``-ed the JVM, and a reused PID does not have it.
    """
    proc = Path("/proc") / str(pid)
    environ = b""
    for _ in range(50):
        if not alive(pid):
            return False
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            environ = b""
        if environ:
            break
        time.sleep(0.02)  # read mid-exec (the start scripts exec into the JVM): no environment to read yet
    return f"FLINK_CONF_DIR={conf_dir}".encode() in environ.split(b"\0")


def _java_opts(home: Path) -> str:
    """The distribution's ``env.java.opts.all`` (the ``--add-opens`` Flink needs on Java 17+)."""
    text = (home / "conf" / "config.yaml").read_text()
    found = re.search(r"^\s+all:\s*(--add-\S.*)$", text, re.MULTILINE)
    return found.group(1).strip() if found else ""


def cluster_config(run: FlinkDir, home: Path, slots: int, python: str) -> dict[str, str]:
    """The cluster's ``config.yaml`` entries (flat keys, as Flink 2 accepts them).

    Checkpoints are retained on cancellation, so a cancelled job can still be resumed (``flink run -s``
    from its last checkpoint). A failed job restarts every 2 s without a practical limit: after a lost
    TaskManager it waits for a new one rather than failing for good.
    """
    return {
        "env.java.opts.all": _java_opts(home),
        "jobmanager.rpc.address": "127.0.0.1",
        "jobmanager.rpc.port": str(free_port()),
        "jobmanager.bind-host": "127.0.0.1",
        "jobmanager.memory.process.size": f"{JM_PROCESS_MB}m",
        "jobmanager.execution.failover-strategy": "region",
        "taskmanager.bind-host": "127.0.0.1",
        "taskmanager.host": "127.0.0.1",
        "taskmanager.rpc.port": "0",
        "taskmanager.data.port": "0",
        "taskmanager.numberOfTaskSlots": str(slots),
        "taskmanager.memory.process.size": f"{TM_PROCESS_MB}m",
        "blob.server.port": str(free_port()),
        "rest.address": "127.0.0.1",
        "rest.bind-address": "127.0.0.1",
        "rest.port": str(run.rest_port()),
        "parallelism.default": "1",
        "heartbeat.interval": str(HEARTBEAT_INTERVAL_MS),
        "heartbeat.timeout": str(HEARTBEAT_TIMEOUT_MS),
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": run.checkpoint_dir.as_uri(),
        "execution.checkpointing.savepoint-dir": run.savepoint_dir.as_uri(),
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "execution.checkpointing.num-retained": "3",
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "1000",
        "restart-strategy.fixed-delay.delay": "2 s",
        "table.local-time-zone": "UTC",
        "python.executable": python,
        "python.client.executable": python,
        "io.tmp.dirs": str(run.root / "tmp"),
    }


def _write_config(run: FlinkDir, entries: dict[str, str]) -> None:
    """``config.yaml`` as flat ``key: "value"`` lines (JSON strings are valid YAML double-quoted scalars)."""
    run.conf_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"{key}: {json.dumps(value)}" for key, value in entries.items()]
    (run.conf_dir / "config.yaml").write_text("\n".join(lines) + "\n")
    for name in ("log4j.properties", "log4j-console.properties", "log4j-cli.properties", "logback.xml",
                 "logback-console.xml"):
        source = flink_home() / "conf" / name
        if source.exists():
            shutil.copyfile(source, run.conf_dir / name)


def _fill_lib(run: FlinkDir, home: Path) -> None:
    """``lib/``: the distribution's jars (links) and copies of the connector jars (re-made on every start).

    The connector jars are copied (hard-linked where possible): the jar cache is replaced as a whole when
    its POM changes, which would leave a running cluster's links dangling.
    """
    shutil.rmtree(run.lib_dir, ignore_errors=True)
    run.lib_dir.mkdir(parents=True)
    for jar in sorted((home / "lib").glob("*.jar")):
        (run.lib_dir / jar.name).symlink_to(jar.resolve())
    for jar in sorted(jar_dir("flink").glob("*.jar")):
        try:
            os.link(jar, run.lib_dir / jar.name)
        except OSError:
            shutil.copyfile(jar, run.lib_dir / jar.name)


def start(root: Path, slots: int = 2, timeout_s: float = 120.0, python: str | None = None) -> FlinkDir:
    """Start a JobManager and one TaskManager in ``root``; return once ``/overview`` shows the slots.

    ``python`` runs the job clients and any Python workers (default: this interpreter). A cluster already
    running in ``root`` is returned as is.
    """
    run = FlinkDir(root)
    if run.jobmanager_pid() is not None:
        return run
    home = flink_home()
    for folder in (run.log_dir, run.pid_dir, run.checkpoint_dir, run.savepoint_dir, run.root / "tmp"):
        folder.mkdir(parents=True, exist_ok=True)
    run.port_file.write_text(str(free_port()))
    _write_config(run, cluster_config(run, home, slots, python or sys.executable))
    _fill_lib(run, home)
    jobmanager = _spawn(run, JOBMANAGER)
    try:
        await_rest(run, timeout_s, jobmanager)
        start_taskmanager(run.root, timeout_s=timeout_s)
        wait_for(lambda: _total_slots(run) >= slots, timeout_s, f"{slots} slots in {run.rest_url()}/overview")
    except PipelineError:
        stop(run.root)
        raise
    log.info("flink cluster up at %s (%d slots), run folder %s", run.rest_url(), slots, run.root)
    return run


def _spawn(run: FlinkDir, role: str) -> subprocess.Popen[bytes]:
    """Start one daemon in the foreground as our child and record its PID."""
    script = flink_home() / "bin" / f"{role}.sh"
    index = len(list(run.pid_dir.glob(f"{role}-*.pid")))
    out = run.log_dir / f"{role}-{index}.stdout"
    with open(out, "ab") as sink:
        proc = subprocess.Popen(["bash", str(script), "start-foreground"], env=run.env(), stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    (run.pid_dir / f"{role}-{index}.pid").write_text(str(proc.pid))
    return proc


def rest_get(url: str, path: str, timeout_s: float = 5.0) -> Any:
    """GET a REST resource of the cluster as JSON."""
    with urllib.request.urlopen(f"{url}{path}", timeout=timeout_s) as response:
        return json.loads(response.read())


def await_rest(run: FlinkDir, timeout_s: float, jobmanager: subprocess.Popen[bytes]) -> None:
    """Wait until the JobManager (our child ``jobmanager``) answers ``/overview``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if jobmanager.poll() is not None:
            msg = f"the Flink JobManager exited with {jobmanager.returncode}; logs:\n{run.tail_logs()}"
            raise PipelineError(msg)
        with contextlib.suppress(OSError, ValueError):
            rest_get(run.rest_url(), "/overview", timeout_s=2)
            return
        time.sleep(0.3)
    msg = f"the Flink JobManager did not answer at {run.rest_url()} in {timeout_s:.0f}s; logs:\n{run.tail_logs()}"
    raise PipelineError(msg)


def overview(root: Path) -> dict[str, Any]:
    """The cluster's ``/overview`` (TaskManagers, slots, jobs by state)."""
    result: dict[str, Any] = rest_get(FlinkDir(root).rest_url(), "/overview")
    return result


def start_taskmanager(root: Path, timeout_s: float = 120.0) -> int:
    """Start one more TaskManager; return its PID once its slots show in ``/overview``."""
    run = FlinkDir(root)
    before = set(_taskmanagers(run))
    proc = _spawn(run, TASKMANAGER)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            msg = f"the Flink TaskManager exited with {proc.returncode}; logs:\n{run.tail_logs()}"
            raise PipelineError(msg)
        if any(slots > 0 for tm, slots in _taskmanagers(run).items() if tm not in before):
            return proc.pid
        time.sleep(0.3)
    msg = f"the TaskManager's slots did not register in {timeout_s:.0f}s; logs:\n{run.tail_logs()}"
    raise PipelineError(msg)


def _total_slots(run: FlinkDir) -> int:
    try:
        return int(rest_get(run.rest_url(), "/overview")["slots-total"])
    except (OSError, ValueError, KeyError):
        return 0


def _taskmanagers(run: FlinkDir) -> dict[str, int]:
    """Slots per registered TaskManager id (a killed one stays listed until its heartbeat times out)."""
    try:
        taskmanagers = rest_get(run.rest_url(), "/taskmanagers")["taskmanagers"]
    except (OSError, ValueError, KeyError):
        return {}
    return {str(tm["id"]): int(tm.get("slotsNumber", 0)) for tm in taskmanagers}


def kill_taskmanager(root: Path, pid: int | None = None) -> int:
    """SIGKILL one TaskManager of this cluster (``pid``, else the newest); return the PID killed."""
    run = FlinkDir(root)
    live = run.pids(TASKMANAGER)
    if pid is None:
        if not live:
            msg = "no running TaskManager to kill"
            raise ConfigError(msg)
        pid = list(live.values())[-1]
    elif pid not in live.values():
        msg = f"pid {pid} is not a TaskManager of {run.root}"
        raise ConfigError(msg)
    os.kill(pid, signal.SIGKILL)
    _await_exit(pid, run.conf_dir, 30.0)
    return pid


def stop(root: Path, timeout_s: float = 30.0) -> bool:
    """Stop every process this module started in ``root`` (SIGTERM, SIGKILL after ``timeout_s``)."""
    run = FlinkDir(root)
    pids = list(run.pids(TASKMANAGER).items()) + list(run.pids(JOBMANAGER).items())
    for _, pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for pid_file, pid in pids:
        _await_exit(pid, run.conf_dir, timeout_s)
        pid_file.unlink(missing_ok=True)
    return bool(pids)


def _await_exit(pid: int, conf_dir: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while is_flink_process(pid, conf_dir) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.1)
    if is_flink_process(pid, conf_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while is_flink_process(pid, conf_dir):
            _reap(pid)
            time.sleep(0.05)
    _reap(pid)


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def wait_for(condition: Any, timeout_s: float, what: str, interval_s: float = 0.5) -> Any:
    """Poll ``condition()`` until it returns something truthy; ``PipelineError`` naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)
    msg = f"timed out after {timeout_s:.0f}s waiting for {what}"
    raise PipelineError(msg)
