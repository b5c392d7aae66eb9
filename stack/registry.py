"""A local schema registry with a Confluent-compatible API (Apicurio Registry, in memory), no Docker needed.

Apicurio is published on Maven Central as application jars, not as a runnable program: the POM in
``stack/maven/registry`` has Quarkus build it once into a runnable jar plus its ``lib/``, cached like the
other jar folders (``$LLMPIPE_CACHE`` or ``~/.cache/llmpipe``, ``registry/``, tagged with the POM's hash:
an unchanged POM builds nothing). Its storage is in memory: a restart forgets every schema, which is
what tests and demos want (the typed topic is derived data and gpu_stage registers again at start).

The registry's PID, port and log live in one run folder, so ``stop`` ends exactly the process this
launcher started. The Confluent-compatible API is at :data:`CCOMPAT_PATH` under the base URL.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from llmpipe.errors import ConfigError, SourceError
from stack.broker import java_binary
from stack.jars import POMS, cache_root, cached_by_pom, empty_staging, maven
from stack.procs import alive, command_line, free_port, recorded_pid

log = logging.getLogger(__name__)

CCOMPAT_PATH = "/apis/ccompat/v6"
"""Apicurio 2.x's Confluent Schema Registry API (v6 of Confluent's REST API)."""
RUNNER = "schema-registry-0-runner.jar"
"""The jar Quarkus builds from the POM (artifact ``schema-registry``, version ``0``)."""


def build_dir() -> Path:
    """Folder with the runnable registry (``RUNNER`` and ``lib/``), built first if the POM changed."""
    return cached_by_pom(POMS / "registry" / "pom.xml", cache_root() / "registry", _build,
                         lambda target: (target / RUNNER).exists())


def _build(pom: Path, target: Path) -> None:
    """``mvn package`` on a copy of the POM outside the repository; keep only the runner and its lib."""
    mvn = maven("build the schema registry")
    staging = empty_staging(target)
    work = staging / "build"
    work.mkdir(parents=True)
    shutil.copyfile(pom, work / "pom.xml")
    log.info("building the schema registry into %s (once per POM; a few minutes the first time)", target)
    done = subprocess.run([mvn, "-q", "-B", "-f", str(work / "pom.xml"), "package", "-DskipTests"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0 or not (work / "target" / RUNNER).exists():
        msg = f"mvn failed to build the schema registry from {pom}:\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
        raise ConfigError(msg)
    (work / "target" / RUNNER).rename(staging / RUNNER)
    (work / "target" / "lib").rename(staging / "lib")
    shutil.rmtree(work)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


@dataclass(frozen=True)
class RegistryDir:
    """The files of one registry run: pid, port, log."""

    root: Path

    @property
    def pid_file(self) -> Path:
        """PID of the running registry."""
        return self.root / "registry.pid"

    @property
    def port_file(self) -> Path:
        """HTTP port of the running registry."""
        return self.root / "registry.port"

    @property
    def log_file(self) -> Path:
        """The registry's stdout and stderr."""
        return self.root / "registry.log"

    def pid(self) -> int | None:
        """PID of the recorded registry if that process is alive and was started for this folder."""
        pid = recorded_pid(self.pid_file)
        return pid if pid is not None and _is_registry(pid, self.root) else None

    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` of the recorded registry."""
        return f"http://127.0.0.1:{self.port_file.read_text().strip()}"

    def url(self) -> str:
        """The Confluent-compatible API root: what ``--schema-registry-url`` takes."""
        return self.base_url() + CCOMPAT_PATH

    def tail_log(self, lines: int = 40) -> str:
        """Last lines of the registry log, for error messages."""
        if not self.log_file.exists():
            return "(no registry log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


def _is_registry(pid: int, root: Path) -> bool:
    """True when ``pid`` is a live (not zombie) registry JVM started with ``root`` as its run folder."""
    return alive(pid) and f"-Dllmpipe.registry.dir={root}".encode() in command_line(pid)


def start(root: Path, port: int | None = None, timeout_s: float = 120.0, heap_mb: int = 256) -> RegistryDir:
    """Start the registry in ``root`` (built first if needed); return once its API answers.

    A registry already running in ``root`` is returned as is. It listens on 127.0.0.1 only.
    """
    run = RegistryDir(root)
    if run.pid() is not None:
        return run
    home = build_dir()
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    command = [
        java_binary(), f"-Xmx{heap_mb}m", "-XX:TieredStopAtLevel=1", f"-Dllmpipe.registry.dir={root}",
        f"-Dquarkus.http.port={port}", "-Dquarkus.http.host=127.0.0.1", "-jar", str(home / RUNNER),
    ]  # fmt: skip
    with open(run.log_file, "ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=root, start_new_session=True)
    run.pid_file.write_text(str(proc.pid))
    run.port_file.write_text(str(port))
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline and not _answers(run.url() + "/subjects"):
        time.sleep(0.2)
    if proc.poll() is not None or time.monotonic() >= deadline:
        stop(root)
        msg = f"schema registry did not start (exit={proc.poll()}); log tail:\n{run.tail_log()}"
        raise SourceError(msg)
    return run


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def stop(root: Path, timeout_s: float = 20.0) -> bool:
    """Stop the registry this launcher started in ``root`` (SIGTERM, SIGKILL after ``timeout_s``)."""
    run = RegistryDir(root)
    pid = run.pid()
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while run.pid() is not None and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.1)
    if run.pid() is not None:
        os.kill(pid, signal.SIGKILL)
        while run.pid() is not None:
            _reap(pid)
            time.sleep(0.05)
    run.pid_file.unlink(missing_ok=True)
    return True


def _reap(pid: int) -> None:
    """Collect the exit status when the registry is our child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
