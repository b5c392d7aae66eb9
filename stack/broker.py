"""A single-node Kafka broker (combined KRaft broker + controller) run from the cached Maven jars.

The broker's PID, ports and log live in one run folder, so ``stop`` kills exactly the process this
launcher started and nothing else.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from llmpipe.errors import ConfigError, SourceError
from llmpipe.kafka_io import KafkaSettings, TransactionalProducer, await_cluster
from stack.jars import jar_dir
from stack.procs import alive, command_line, free_port, recorded_pid

log = logging.getLogger(__name__)

LOG4J = Path(__file__).with_name("log4j2.properties")

GC_PAUSE_MS = 20
"""G1's pause-time goal for the broker: what ``kafka-run-class.sh`` passes (``-XX:MaxGCPauseMillis=20``)."""

GC_LOG = "kafkaServer-gc.log"
"""The broker's GC log in its logs folder, named as Kafka's start scripts name it."""

# Transactions: Flink's exactly-once sink defaults to a 1 h transaction timeout, so allow it.
# Retention: no time limit (the run folder is wiped with `down --wipe`), since tests, demos and
# replays write records whose timestamps can lie far in the past.
SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}{sasl_listener}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}{sasl_listener}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
log.dirs={data}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms={rebalance_delay_ms}
num.network.threads={network_threads}
num.io.threads={io_threads}
auto.create.topics.enable=false
transaction.max.timeout.ms=3600000
message.max.bytes=16777216
log.retention.ms=-1
"""


NETWORK_THREADS, IO_THREADS = 3, 8
"""Kafka's defaults for the threads that move requests between the sockets and the request queue
(``num.network.threads``) and that handle the requests, disk included (``num.io.threads``). One
broker that serves many clients at gigabytes a second (a throughput run on one host) may want more."""


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` when set, else ``java`` on PATH (Kafka 4 needs Java 17+)."""
    home = os.environ.get("JAVA_HOME")
    candidate = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not candidate:
        msg = "no java found: install Java 17+ or set JAVA_HOME"
        raise ConfigError(msg)
    return candidate


@dataclass(frozen=True)
class BrokerDir:
    """The files of one broker run: config, data, log, pid."""

    root: Path

    @property
    def pid_file(self) -> Path:
        """PID of the running broker."""
        return self.root / "broker.pid"

    @property
    def port_file(self) -> Path:
        """Client port of the running broker."""
        return self.root / "broker.port"

    @property
    def log_file(self) -> Path:
        """The broker's log (stdout, stderr and log4j)."""
        return self.root / "logs" / "server.log"

    @property
    def sasl_port_file(self) -> Path:
        """Port of the SASL_PLAINTEXT listener, when the broker has one."""
        return self.root / "broker.sasl-port"

    def pid(self) -> int | None:
        """PID of the recorded broker if that process is alive and is this folder's broker.

        A PID alone proves nothing: a killed broker leaves its PID file behind, and the number can
        belong to another process since (or to a zombie not yet reaped).
        """
        pid = recorded_pid(self.pid_file)
        return pid if pid is not None and is_broker(pid, self.root / "server.properties") else None

    def sasl_bootstrap(self) -> str | None:
        """``127.0.0.1:<port>`` of the SASL_PLAINTEXT listener, if any."""
        if not self.sasl_port_file.exists():
            return None
        return f"127.0.0.1:{self.sasl_port_file.read_text().strip()}"

    def bootstrap(self) -> str:
        """``127.0.0.1:<port>`` of the recorded broker."""
        return f"127.0.0.1:{self.port_file.read_text().strip()}"

    def tail_log(self, lines: int = 60) -> str:
        """Last lines of the broker log, for error messages."""
        if not self.log_file.exists():
            return "(no broker log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


def is_broker(pid: int, config: Path) -> bool:
    """True when ``pid`` is a live (not zombie) Kafka broker started with ``config``."""
    argv = command_line(pid)
    return alive(pid) and b"kafka.Kafka" in argv and str(config).encode() in argv


def sasl_listener(port: int | None, users: Mapping[str, str]) -> tuple[str, str]:
    """The extra ``listeners`` entry and the properties of a SASL_PLAINTEXT listener with PLAIN users.

    Both are empty without a port.
    """
    if port is None:
        return "", ""
    entries = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    config = ("sasl.enabled.mechanisms=PLAIN\nlistener.name.sasl_plaintext.plain.sasl.jaas.config="
              f"org.apache.kafka.common.security.plain.PlainLoginModule required {entries};\n")  # fmt: skip
    return f",SASL_PLAINTEXT://127.0.0.1:{port}", config


def new_cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` prints it (22 base64url characters), without a JVM."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def start(
    root: Path,
    port: int | None = None,
    timeout_s: float = 90.0,
    heap_mb: int = 512,
    cluster_id: str | None = None,
    *,
    full_jit: bool = False,
    rebalance_delay_ms: int = 0,
    gc_pause_ms: int = GC_PAUSE_MS,
    sasl_users: Mapping[str, str] | None = None,
    network_threads: int = NETWORK_THREADS,
    io_threads: int = IO_THREADS,
) -> BrokerDir:
    """Format storage (first time only) and start a broker in ``root``; return once it serves requests.

    By default the JVM stops at the quick compiler and a consumer group's first rebalance is not
    delayed (tests and demos start many short-lived brokers and groups); ``full_jit`` lets the JVM
    optimize fully and ``rebalance_delay_ms`` (Kafka's default is 3000) lets a group of many members
    starting together join in one rebalance, for throughput runs. The JVM runs with the garbage
    collector settings of Kafka's own start scripts (``jvm_options``) and logs its collections to
    ``logs/kafkaServer-gc.log`` as they do. ``sasl_users`` (name → password) adds a SASL_PLAINTEXT
    listener with PLAIN authentication on another port (:meth:`BrokerDir.sasl_bootstrap`).
    ``network_threads`` and ``io_threads`` size the broker's request threads (:data:`NETWORK_THREADS`).
    """
    run = BrokerDir(root)
    if run.pid() is not None:
        return run
    port = port or (int(run.port_file.read_text()) if run.port_file.exists() else free_port())
    (root / "logs").mkdir(parents=True, exist_ok=True)
    config = root / "server.properties"
    sasl_port = free_port() if sasl_users else None
    listener, sasl_config = sasl_listener(sasl_port, sasl_users or {})
    config.write_text(SERVER_PROPERTIES.format(
        port=port, controller_port=free_port(), data=root / "data", rebalance_delay_ms=rebalance_delay_ms,
        sasl_listener=listener, network_threads=network_threads, io_threads=io_threads,
    ) + sasl_config)
    classpath = f"{jar_dir('kafka')}/*"
    jvm = [java_binary(), f"-Dlog4j2.configurationFile={LOG4J}", f"-Dkafka.logs.dir={root / 'logs'}"]
    if not (root / "data" / "meta.properties").exists():
        _format(jvm, classpath, config, cluster_id or new_cluster_id())
    options = jvm_options(root / "logs", heap_mb, gc_pause_ms=gc_pause_ms, full_jit=full_jit)
    with open(root / "logs" / "stdout.log", "ab") as out:
        proc = subprocess.Popen([*jvm, *options, "-cp", classpath, "kafka.Kafka", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    run.pid_file.write_text(str(proc.pid))
    run.port_file.write_text(str(port))
    if sasl_port is not None:
        run.sasl_port_file.write_text(str(sasl_port))
    else:
        run.sasl_port_file.unlink(missing_ok=True)
    _await_ready(run, proc, timeout_s)
    return run


def jvm_options(logs: Path, heap_mb: int, *, gc_pause_ms: int = GC_PAUSE_MS, full_jit: bool = False) -> list[str]:
    """Heap, garbage collector and GC log options, as ``kafka-run-class.sh`` sets them by default.

    G1 aims at ``gc_pause_ms`` per pause (the JVM's own default is 200 ms, which lets it grow the
    young generation until one pause holds every request for tens of milliseconds); the log shows
    when the broker paused, to set against a latency run's tail.
    """
    gc_log = f"-Xlog:gc*:file={logs / GC_LOG}:time,uptime,tags:filecount=10,filesize=100M"
    return [f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m", "-XX:+UseG1GC", f"-XX:MaxGCPauseMillis={gc_pause_ms}",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true", gc_log, *([] if full_jit else ["-XX:TieredStopAtLevel=1"])]  # fmt: skip


def _format(jvm: list[str], classpath: str, config: Path, cluster_id: str) -> None:
    # "--cluster-id=<id>" in one argument: a base64url id may start with "-" and would read as an option.
    command = [*jvm, "-cp", classpath, "kafka.tools.StorageTool", "format", "--standalone",
               f"--cluster-id={cluster_id}", "-c", str(config)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        msg = f"formatting KRaft storage failed:\n{done.stdout}{done.stderr}"
        raise SourceError(msg)


def _await_ready(run: BrokerDir, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    settings = KafkaSettings(bootstrap=run.bootstrap())
    deadline = time.monotonic() + timeout_s
    port = int(run.port_file.read_text())
    while proc.poll() is None and time.monotonic() < deadline and not _accepts(port):
        time.sleep(0.1)
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            await_cluster(settings, timeout_s=2, say=False)
            break
        except SourceError:
            continue
    if proc.poll() is not None or time.monotonic() >= deadline:
        stop(run.root)
        msg = f"broker did not start (exit={proc.poll()}); log tail:\n{run.tail_log()}"
        raise SourceError(msg)
    # The first FindCoordinator creates __transaction_state; do it now, not in the first test.
    TransactionalProducer(settings, f"stack-warmup-{uuid.uuid4()}", timeout_s=60)


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def stop(root: Path, timeout_s: float = 30.0, hard: bool = False) -> bool:
    """Stop the broker this launcher started in ``root`` (SIGTERM, SIGKILL after ``timeout_s``)."""
    run = BrokerDir(root)
    pid = run.pid()
    if pid is None:
        return False
    os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
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
    """Collect the exit status when the broker is our child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
