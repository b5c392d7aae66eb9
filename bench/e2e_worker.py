"""``python -m bench.e2e_worker``: raw → typed through a real broker, K gpu_stage workers in one group.

Loads N raw records (bodies cycled from a pool of ``--pool`` distinct ones of ``--corpus``, by default
the real-shaped corpus of :mod:`bench.real_corpus`, or read by ``--corpus-in``; unique keys, the
connector's headers) into a fresh raw topic of P partitions in one open transaction (not timed),
starts K ``python -m gpu_stage`` workers in one consumer group (one Kafka transaction per batch,
``read_committed``), commits the load once all K are in the group and own partitions (so none starts
ahead of the others), stops them once the group has committed the end of every raw partition, and
then checks that the ``read_committed`` typed and DLQ topics hold every key exactly once.

The rate is over the busy span: from the earliest first input record of any worker to the latest
last commit, both taken from the workers' closing ``summary:`` lines (wall clock, same host), so
process start-up and the idle wait before exit are not counted; the whole wall time is reported too.
Not a test: the figures depend on the host, the broker and their neighbours.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import os
import platform
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import corpora, gc_log, worker_perf
from bench.e2e_summary import cpu_figures, mean_backend_stages, mean_steps, summaries
from bench.machine import CpuWindow, gpu_name, unwritten_mb, write_back
from gpu_stage import synth
from gpu_stage.transform.api import DEVICE_WAITS, LANE_ORDERS
from llmpipe import headers as h
from llmpipe.kafka_io import (
    COMPRESSIONS,
    FETCH_QUEUE_BACKOFF_MS,
    TXN_RETRY_BACKOFF_MS,
    KafkaSettings,
    TransactionalProducer,
    create_topics,
    delete_topics,
    end_offsets,
    group_members,
    group_offsets,
    read_topic,
)
from llmpipe.record import TypedRecord
from llmpipe.runtime import configure_logging

log = logging.getLogger("bench.e2e_worker")

RESULTS = Path(__file__).resolve().parent / "results"
PROFILE_FILE = "worker-0.speedscope.json"
"""Where ``--profile-worker`` writes worker 0's samples, in its run's log folder."""
"""Per-worker keys ``thread_us:<group>``: a thread group's CPU µs per record (``llmpipe.threads``)."""
"""Per-worker keys of the mean milliseconds per batch step, in the order of ``STEPS``'s groups."""
HEADERS = [
    (h.HTTP_STATUS, b"200"), (h.LATENCY_MS, b"1834"), (h.ATTEMPTS, b"1"),
    (h.ENDPOINT, b"http://vllm-0.vllm.svc:8000/v1/chat/completions"), (h.MODEL, b"Qwen/Qwen2.5-7B-Instruct"),
    (h.RECEIVED_AT_MS, b"1764979200123"), (h.ATTRIBUTES, b'{"tenant":"acme","arm":"b","user":"u-1029"}'),
]  # fmt: skip
"""The headers of every loaded raw record: all seven that the connector writes (values of a typical
call), since reading them is a large part of a worker's cost per record."""
TOPIC_CONFIG = {"max.message.bytes": str(64 << 20)}
# The load's transaction stays open while the workers start (the broker allows up to an hour).
LOAD_TXN_TIMEOUT_MS = 900_000


def load_raw(
    kafka: KafkaSettings, topic: str, records: int, partitions: int, pool: int, values: list[bytes] | None = None
) -> RawLoad:
    """Write ``records`` raw records (bodies cycled from ``values``) in one open transaction.

    Without ``values``, ``min(records, pool)`` bodies of :mod:`gpu_stage.synth`. ``read_committed``
    workers see none of them until :meth:`RawLoad.commit`, so every worker can be started and in the
    group first: the busy span then measures K workers, not the first ones to finish starting up (the
    GPU backend compiles its kernels at start, for tens of seconds).
    """
    create_topics(kafka, {topic: partitions}, TOPIC_CONFIG)
    bodies = values if values else synth.bodies(min(records, pool))
    producer = TransactionalProducer(
        kafka, f"bench-load-{uuid.uuid4().hex[:8]}", timeout_s=300,
        config={"linger.ms": 50, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
                "transaction.timeout.ms": LOAD_TXN_TIMEOUT_MS},
    )  # fmt: skip
    started = time.perf_counter()
    producer.begin()
    keys = (f"req-{i:09d}".encode() for i in range(records))
    producer.produce_many(topic, (bodies[i % len(bodies)] for i in range(records)), keys, HEADERS)
    producer.flush(300)
    return RawLoad(producer, time.perf_counter() - started)


@dataclass
class RawLoad:
    """The loaded raw records' open transaction and how long writing them took."""

    producer: TransactionalProducer
    seconds: float

    def commit(self) -> None:
        """Make every loaded record visible at once."""
        self.producer.commit()

    def abort(self) -> None:
        """Drop the load (the run failed before it started)."""
        self.producer.abort()


def wait_group(kafka: KafkaSettings, group: str, members: int, procs: list[Any], timeout_s: float) -> float:
    """Block until ``group`` is stable with ``members`` members that each own partitions; the seconds waited.

    Raises ``SystemExit`` when a worker exits first or the time runs out (its log says why).
    """
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        exited = [k for k, (proc, _) in enumerate(procs) if proc.poll() is not None]
        if exited:
            msg = f"worker(s) {exited} exited before the group was complete; see their logs"
            raise SystemExit(msg)
        state, owned = group_members(kafka, group)
        if state == "STABLE" and len(owned) == members and all(owned):
            return time.monotonic() - started
        time.sleep(0.25)
    msg = f"group {group} did not reach {members} members owning partitions in {timeout_s:.0f}s"
    raise SystemExit(msg)


@dataclass(frozen=True)
class Topics:
    """Fresh topic names of one run and the folder its worker logs go to."""

    raw: str
    typed_base: str
    typed: str
    dlq: str
    logs: Path

    def all(self) -> list[str]:
        """Every topic of the run (for deletion)."""
        return [self.raw, self.typed, self.dlq]


def fresh_topics(kafka: KafkaSettings, args: argparse.Namespace, *, with_raw: bool) -> Topics:
    """Name and create a run's topics (typed and DLQ; raw too when ``with_raw``), make its log folder."""
    tag = uuid.uuid4().hex[:8]
    typed_base = f"bench.typed.{tag}"
    topics = Topics(f"bench.raw.{tag}", typed_base, TypedRecord.from_file().versioned_topic(typed_base),
                    f"bench.dlq.{tag}", args.logs / tag)
    # The DLQ has as many partitions as raw, as the stack's topics do: dead letters are co-partitioned too.
    partitions = {topics.typed: args.partitions, topics.dlq: args.partitions}
    if with_raw:
        partitions[topics.raw] = args.partitions
    create_topics(kafka, partitions, TOPIC_CONFIG)
    topics.logs.mkdir(parents=True, exist_ok=True)
    return topics


def start_workers(
    args: argparse.Namespace, raw: str, typed_base: str, dlq: str, logs: Path
) -> tuple[str, list[Any]]:
    """K worker processes in one group (its id is returned), each with its own transactional id and log file."""
    group = f"bench-e2e-{uuid.uuid4().hex[:8]}"
    procs = []
    for k in range(args.workers):
        command = [
            sys.executable, "-m", "gpu_stage", "--bootstrap", args.bootstrap, "--raw-topic", raw,
            "--typed-topic", typed_base, "--dlq-topic", dlq, "--group-id", group,
            "--transactional-id", f"{group}-{k}", "--backend", args.backend,
            "--batch-records", str(args.batch_records), "--batch-wait-ms", str(args.batch_wait_ms),
            # A safety net: the run stops the workers itself once the group has committed everything.
            "--exit-when-idle", str(args.idle_s + args.join_timeout_s),
            "--gpu-pool-bytes", str(args.gpu_pool_bytes), "--parse-chunk-records", str(args.parse_chunk_records),
            "--commit-overlap", args.commit_overlap, "--log-level", args.worker_log_level,
            "--compression", args.compression, "--partition-by", args.partition_by,
            *(["--native-threads", str(args.native_threads)] if args.native_threads else []),
            *(["--gpu-min-batch", str(args.gpu_min_batch)] if args.gpu_min_batch >= 0 else []),
            *(["--txn-retry-backoff-ms", str(args.txn_retry_backoff_ms)] if args.txn_retry_backoff_ms else []),
            *(["--fetch-backoff-ms", str(args.fetch_backoff_ms)] if args.fetch_backoff_ms >= 0 else []),
            *(["--warm-up-records", str(args.warm_up_records)] if args.warm_up_records >= 0 else []),
            *(["--lane-order", args.lane_order] if args.lane_order else []),
            *(["--device-wait", args.device_wait] if args.device_wait else []),
            *(["--kafka-reader", args.kafka_reader] if args.kafka_reader else []),
            *(["--kafka-writer", args.kafka_writer] if args.kafka_writer else []),
            *(arg for pair in args.consumer_config.split() for arg in ("--consumer-config", pair)),
            *(arg for pair in args.producer_config.split() for arg in ("--producer-config", pair)),
        ]  # fmt: skip
        out = open(logs / f"worker-{k}.log", "wb")  # noqa: SIM115 - closed after the process exits
        procs.append((subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, **worker_tree(args)), out))
    return group, procs


def worker_tree(args: argparse.Namespace) -> dict[str, Any]:
    """``Popen`` arguments that run the workers from ``--worker-tree`` (another checkout), when given.

    Its packages come first on the path and it is the working directory, so the workers run that
    code while this process (the load, the checks) runs its own: two revisions compare on one broker.
    """
    if not args.worker_tree:
        return {}
    tree = str(Path(args.worker_tree).resolve())
    path = os.pathsep.join(filter(None, (tree, os.environ.get("PYTHONPATH"))))
    return {"cwd": tree, "env": {**os.environ, "PYTHONPATH": path}}


def finish_workers(
    kafka: KafkaSettings, group: str, raw: str, procs: list[Any], timeout_s: float, *, records: int, end_marker: bool
) -> list[int]:
    """Wait until ``group`` has committed the end of every ``raw`` partition, then stop the workers; exit codes.

    ``end_marker``: the raw records were written in one transaction, so the last offset of each
    partition holds its commit marker, and a worker's commit may stop just before a marker it has
    not fetched yet: a committed offset of ``end - 1`` then also means every record of the partition
    is typed or dead-lettered. A worker that exits on its own ends the wait too (its exit code tells).
    """
    slack = 1 if end_marker else 0
    deadline = time.monotonic() + timeout_s
    ends = visible_ends(kafka, raw, records, slack, deadline)
    while time.monotonic() < deadline and all(proc.poll() is None for proc, _ in procs):
        committed = group_offsets(kafka, group)
        if all(committed.get(tp, -1) >= end - slack for tp, end in ends.items()):
            break
        time.sleep(0.5)
    else:
        if all(proc.poll() is None for proc, _ in procs):
            log.warning("group %s did not commit the whole input in %.0fs: stopping its workers", group, timeout_s)
    stop_workers(procs)
    return [proc.returncode for proc, _ in procs]


def visible_ends(kafka: KafkaSettings, raw: str, records: int, markers: int, deadline: float) -> dict[Any, int]:
    """The end offset of every ``raw`` partition once they take in all ``records`` (or at ``deadline``).

    A transaction's commit returns before the broker has written its markers, and until a
    partition's marker is written its ``read_committed`` end offset stops before the transaction's
    records: taken that early, the ends would say that the workers were done before they began.
    ``markers``: the offsets per partition that hold no record (1 for a load's commit marker).
    """
    while True:
        ends = {(raw, p): end for p, end in end_offsets(kafka, raw).items()}
        if sum(ends.values()) - markers * len(ends) >= records or time.monotonic() >= deadline:
            return ends
        time.sleep(0.1)


def stop_workers(procs: list[Any]) -> None:
    """SIGTERM every worker still running and wait for it (a run that failed before it started)."""
    for proc, _ in procs:
        if proc.poll() is None:
            proc.terminate()
    wait_workers(procs)


def profile_worker(args: argparse.Namespace, procs: list[Any], logs: Path) -> subprocess.Popen[bytes] | None:
    """With ``--profile-worker``: py-spy sampling worker 0 from now (the group has joined) until it exits.

    Sampled without pausing the worker (``--nonblocking``), wall-clock (``--idle``), per thread. It
    attaches to a running process, which takes ptrace permission; where that is refused, py-spy says
    so in its log and the run goes on unprofiled.
    """
    if not args.profile_worker:
        return None
    command = [args.profile_worker, "record", "--pid", str(procs[0][0].pid), "--nonblocking", "--idle",
               "--threads", "--rate", "100", "--format", "speedscope", "-o", str(logs / PROFILE_FILE)]  # fmt: skip
    with open(logs / "py-spy.log", "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def wait_workers(procs: list[Any]) -> list[int]:
    """Wait for every worker, close its log file; their exit codes."""
    codes = [p.wait() for p, _ in procs]
    for _, out in procs:
        out.close()
    return codes


def check_keys(kafka: KafkaSettings, typed: str, dlq: str, records: int) -> dict[str, int]:
    """Every loaded key exactly once across the read_committed typed and DLQ topics."""
    keys = Counter(m.key for m in read_topic(kafka, typed, timeout_s=600))
    keys.update(m.key for m in read_topic(kafka, dlq, timeout_s=600))
    expected = {f"req-{i:09d}".encode() for i in range(records)}
    return {
        "typed_plus_dlq": sum(keys.values()),
        "missing": len(expected - set(keys)),
        "duplicates": sum(1 for n in keys.values() if n > 1),
        "unexpected": len(set(keys) - expected),
    }


LANE_ENV = ("GPU_STAGE_LANE_ORDER", "GPU_STAGE_LANE_REGISTERS", "GPU_STAGE_DEVICE_WAIT", "GPU_STAGE_LANE_OUTLINE")
"""The device lane's settings the workers may take from this process's environment, kept in the result
(a whitelist: other ``GPU_STAGE_`` variables may hold secrets)."""


def common_result(
    args: argparse.Namespace, codes: list[int], per_worker: list[dict[str, float]], check: dict[str, int]
) -> dict[str, Any]:
    """The result fields every end-to-end run reports: host, setup, exit codes, workers, key check."""
    return {
        "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "gpu": gpu_name() if args.backend == "gpu" else None,
        "backend": args.backend, "workers": args.workers, "partitions": args.partitions,
        "records": args.records, "batch_records": args.batch_records, "batch_wait_ms": args.batch_wait_ms,
        "commit_overlap": args.commit_overlap, "compression": args.compression, "partition_by": args.partition_by,
        "native_threads": args.native_threads or None,
        "gpu_min_batch": None if args.gpu_min_batch < 0 else args.gpu_min_batch,
        "txn_retry_backoff_ms": args.txn_retry_backoff_ms or None,
        "fetch_backoff_ms": None if args.fetch_backoff_ms < 0 else args.fetch_backoff_ms,
        "warm_up_records": None if args.warm_up_records < 0 else args.warm_up_records,
        "consumer_config": args.consumer_config, "producer_config": args.producer_config,
        "lane_env": {name: os.environ[name] for name in LANE_ENV if name in os.environ},
        "lane_order": args.lane_order or None, "device_wait": args.device_wait or None,
        "kafka_reader": args.kafka_reader or None, "kafka_writer": args.kafka_writer or None,
        "worker_tree": args.worker_tree or None,
        "worker_revision": _revision(args.worker_tree or "."),
        "native_library": native_library(),
        "exit_codes": codes, "per_worker": per_worker, "check": check,
        "exactly_once": check["missing"] == 0 and check["duplicates"] == 0 and check["unexpected"] == 0,
    }  # fmt: skip


def native_library() -> dict[str, str] | None:
    """The native core the workers load (they inherit this process's path): its file and a checksum.

    Two builds of one commit differ only here, e.g. one against patched librdkafka and one without.
    None where it is not installed.
    """
    spec = importlib.util.find_spec("llmpipe_native")
    for directory in (spec.submodule_search_locations or []) if spec else []:
        for library in sorted(Path(directory).glob("llmpipe_native*.so")):
            return {"path": str(library), "sha256": hashlib.sha256(library.read_bytes()).hexdigest()[:16]}
    return None


def _revision(tree: str) -> str | None:
    """The commit checked out in ``tree``; ``-dirty`` added when its tracked files differ from it.

    A run from a changed tree must not pass for a run of the commit. None outside a git checkout.
    """
    git = ["git", "-C", tree]
    try:
        found = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                               timeout=10)  # fmt: skip
        changed = subprocess.run([*git, "diff", "--quiet", "HEAD", "--"], capture_output=True, timeout=30).returncode
    except (OSError, subprocess.SubprocessError):
        return None
    commit = found.stdout.strip() or None
    return f"{commit}-dirty" if commit and changed else commit


def add_run_options(p: argparse.ArgumentParser, *, records: int, batch_records: int, batch_wait_ms: int) -> None:
    """Options every end-to-end run takes: broker, load size, workers and their batching, logs, topics."""
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:19092"))
    p.add_argument("--records", type=int, default=records)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--backend", default="cpu", choices=["cpu", "gpu", "reference"])
    p.add_argument("--batch-records", type=int, default=batch_records)
    p.add_argument("--batch-wait-ms", type=int, default=batch_wait_ms, help="workers close a batch after this long")
    p.add_argument("--idle-s", type=float, default=5.0,
                   help="workers' own exit without input, on top of the join timeout (a safety net: "
                   "the run stops them once everything is committed)")
    p.add_argument("--finish-timeout-s", type=float, default=1800.0,
                   help="how long the workers may take to process everything once the input is there")
    p.add_argument("--join-timeout-s", type=float, default=300.0,
                   help="how long the workers may take to start and join the group (GPU kernels compile at start)")
    p.add_argument("--gpu-pool-bytes", type=int, default=4 << 30)
    p.add_argument("--native-threads", type=int, default=0,
                   help="each GPU worker's native-core threads (0: the worker's default, every usable core)")
    p.add_argument("--gpu-min-batch", type=int, default=-1,
                   help="the GPU workers' --gpu-min-batch: smaller batches parse on the native core "
                   "(-1: the worker's default; 0: every batch on the device)")
    p.add_argument("--parse-chunk-records", type=int, default=10_000,
                   help="workers parse a batch in chunks of this many records while producing (0: no overlap)")
    p.add_argument("--commit-overlap", default="on", choices=["on", "off"],
                   help="workers collect the next batch while the previous one commits")
    p.add_argument("--txn-retry-backoff-ms", type=int, default=0,
                   help="the workers' --txn-retry-backoff-ms (0: the worker's default)")
    p.add_argument("--fetch-backoff-ms", type=int, default=-1,
                   help="the workers' --fetch-backoff-ms (-1: the worker's default)")
    p.add_argument("--warm-up-records", type=int, default=-1,
                   help="the workers' --warm-up-records (-1: the worker's default, one parse call's batch; 0: none)")
    p.add_argument("--consumer-config", default="", metavar="'KEY=VALUE …'",
                   help="librdkafka consumer properties for the workers (their --consumer-config), split by spaces")
    p.add_argument("--producer-config", default="", metavar="'KEY=VALUE …'",
                   help="librdkafka producer properties for the workers' typed and dead-letter producer (their "
                   "--producer-config), split by spaces")
    p.add_argument("--lane-order", default="", choices=["", *LANE_ORDERS],
                   help="the GPU workers' --lane-order (empty: the worker's default)")
    p.add_argument("--device-wait", default="", choices=["", *DEVICE_WAITS],
                   help="the GPU workers' --device-wait (empty: the worker's default)")
    p.add_argument("--kafka-reader", default="", choices=["", "objects", "packed"],
                   help="the workers' --kafka-reader (empty: the worker's default)")
    p.add_argument("--kafka-writer", default="", choices=["", "objects", "packed"],
                   help="the workers' --kafka-writer (empty: the worker's default)")
    p.add_argument("--compression", default="lz4", choices=COMPRESSIONS,
                   help="compression of the raw records the run writes and of the workers' typed records")
    p.add_argument("--partition-by", default="source", choices=["source", "key"],
                   help="the workers' --partition-by: typed and dead-letter records to their raw record's "
                   "partition, or by key")
    p.add_argument("--broker-pid", type=int, default=0,
                   help="the broker's process id on this host: its CPU time over the run is reported per record")
    p.add_argument("--broker-gc-log", type=Path, default=None, metavar="PATH",
                   help="the broker's GC log (the stack writes logs/kafkaServer-gc.log): its pauses over the run "
                   "are reported")
    p.add_argument("--logs", type=Path, default=Path(".bench-e2e"), help="worker logs go below this folder")
    p.add_argument("--worker-log-level", default="INFO",
                   help="the workers' --log-level (INFO,gpu_stage.worker=DEBUG: one line per batch; plain DEBUG "
                   "also logs numba's compiler, tens of thousands of lines a worker)")
    p.add_argument("--keep-topics", action="store_true")
    p.add_argument("--worker-tree", default="", metavar="DIR",
                   help="run the workers from this checkout of the project (e.g. a git worktree of another "
                   "revision) instead of this one")
    p.add_argument("--profile-worker", default="", metavar="PY_SPY",
                   help=f"sample worker 0 with this py-spy executable from the moment the group has joined: its "
                   f"threads' wall-clock samples go to its log folder's {PROFILE_FILE} "
                   "(summarise with python -m bench.profile_summary)")
    p.add_argument("--perf-worker", default="", metavar="PERF",
                   help="record worker 0 with this Linux perf executable from the moment the group has joined, "
                   f"every thread and native frame with call graphs, into its log folder's {worker_perf.PERF_DATA}; "
                   f"after the run, a text report by thread and symbol goes to {worker_perf.PERF_REPORT} beside it")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Load, start the workers, release the load once they are all in the group, check; the result dictionary."""
    kafka = KafkaSettings(bootstrap=args.bootstrap, compression=args.compression)
    pool = corpora.load(args, min(args.records, args.pool))
    topics = fresh_topics(kafka, args, with_raw=False)
    try:
        load = load_raw(kafka, topics.raw, args.records, args.partitions, args.pool, pool.values)
        log.info("loaded %d raw records into %s in %.1fs (not committed yet)", args.records, topics.raw, load.seconds)
        group, procs = start_workers(args, topics.raw, topics.typed_base, topics.dlq, topics.logs)
        try:
            joined_s = wait_group(kafka, group, args.workers, procs, args.join_timeout_s)
        except SystemExit:
            load.abort()
            stop_workers(procs)
            raise
        # Written back now, the load's pages are not written back by the kernel during the measured span.
        write_back_s = write_back() if args.load_write_back == "on" else None
        unwritten_at_release = unwritten_mb()
        log.info("%d workers in group %s after %.1fs%s: committing the load", args.workers, group, joined_s,
                 "" if write_back_s is None else f", the load written back in {write_back_s:.1f}s")  # fmt: skip
        profiler = profile_worker(args, procs, topics.logs)
        perf = worker_perf.start(args.perf_worker, procs[0][0].pid, topics.logs) if args.perf_worker else None
        cpu = CpuWindow(args.broker_pid or None)
        cpu.start()
        load.commit()
        started = time.time()
        codes = finish_workers(
            kafka, group, topics.raw, procs, args.finish_timeout_s, records=args.records, end_marker=True
        )
        if profiler is not None:  # it writes its file once worker 0 has exited
            log.info("py-spy exited %s: %s", profiler.wait(timeout=120), topics.logs / PROFILE_FILE)
        if perf is not None:  # it ends once worker 0 has exited
            log.info("perf exited %s: %s", perf.wait(timeout=120), topics.logs / worker_perf.PERF_DATA)
        wall = time.time() - started
        cpu.stop()
        unwritten_at_end = unwritten_mb()
        per_worker = summaries(topics.logs, args.workers)
        busy = [w for w in per_worker if w["in"] > 0]  # a worker that got no input has no span
        span = max(w["last_commit_at"] for w in busy) - min(w["first_input_at"] for w in busy)
        check = check_keys(kafka, topics.typed, topics.dlq, args.records)
        if perf is not None:  # after the measured span
            log.info("perf report: %s", worker_perf.report(args.perf_worker, topics.logs))
    finally:
        if not args.keep_topics:
            delete_topics(kafka, topics.all())
    return {
        **common_result(args, codes, per_worker, check), "corpus": pool.facts(),
        "load_seconds": round(load.seconds, 2), "load_write_back": args.load_write_back,
        "load_write_back_seconds": None if write_back_s is None else round(write_back_s, 2),
        "unwritten_mb_at_release": unwritten_at_release, "unwritten_mb_at_end": unwritten_at_end,
        "join_seconds": round(joined_s, 2), "wall_seconds": round(wall, 2), "busy_span_seconds": round(span, 3),
        "records_per_s": round(args.records / span, 1), "records_per_s_wall": round(args.records / wall, 1),
        **cpu_figures(cpu, per_worker, args.records),
        "backend_ms_per_batch": mean_backend_stages(per_worker),
        **gc_log.figures(args.broker_gc_log, started, started + wall),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run once, print the figures, write the JSON result."""
    configure_logging("INFO")
    p = argparse.ArgumentParser(prog="python -m bench.e2e_worker", description=__doc__)
    add_run_options(p, records=200_000, batch_records=20_000, batch_wait_ms=200)
    p.add_argument("--pool", type=int, default=100_000, help="distinct bodies made or read (then cycled)")
    corpora.add_options(p)
    p.add_argument("--out", type=Path, default=None,
                   help="result JSON (default bench/results/e2e-<host>-<backend>.json)")
    p.add_argument("--load-write-back", choices=["on", "off"], default="off",
                   help="write the host's dirty pages (the loaded raw records) back to disk before releasing the "
                   "load to the workers (on the H100 host it changed no rate: the kernel had written most of the "
                   "load back by then; the result's unwritten_mb_at_release says how much was left)")
    p.add_argument("--compare-commit-overlap", type=int, default=0, metavar="ROUNDS",
                   help="instead of one run: ROUNDS pairs of runs, --commit-overlap off (the baseline) then on, "
                   "on fresh topics, with the ratio of each pair")
    p.add_argument("--compare-txn-backoff", type=int, default=0, metavar="ROUNDS",
                   help="instead of one run: ROUNDS pairs of runs, the workers' --txn-retry-backoff-ms at "
                   "librdkafka's default 100 (the baseline) then at the worker's default, with the ratio of each pair")
    for option, (base, other) in COST_PAIRS.items():
        p.add_argument(f"--compare-{_compare_name(option)}", type=int, default=0, metavar="ROUNDS",
                       help=f"instead of one run: ROUNDS pairs of runs, --{option.replace('_', '-')} "
                       f"{base} (the baseline) then {other}, with the ratio of each pair's rates and CPU per record")
    p.add_argument("--compare-consumer-config", default="", metavar="'KEY=VALUE …'",
                   help="instead of one run: --rounds pairs of runs, the workers' consumers as they are (the "
                   "baseline) then with these properties, with the ratio of each pair's rates and CPU per record")
    p.add_argument("--compare-producer-config", default="", metavar="'KEY=VALUE …'",
                   help="instead of one run: --rounds pairs of runs, the workers' producers as they are (the "
                   "baseline) then with these properties, with the ratio of each pair's rates and CPU per record")
    p.add_argument("--compare-worker-tree", default="", metavar="DIR",
                   help="instead of one run: --rounds pairs of runs, the workers from this checkout (the "
                   "baseline, e.g. a git worktree of an earlier revision) then from this one")
    p.add_argument("--rounds", type=int, default=1,
                   help="pairs of runs of --compare-consumer-config, --compare-producer-config or "
                   "--compare-worker-tree")
    args = p.parse_args(argv)
    corpora.check(p, args)
    if args.compare_worker_tree:
        return compare_costs(args, "worker_tree", args.rounds, (args.compare_worker_tree, ""))
    if args.compare_consumer_config:
        more = f"{args.consumer_config} {args.compare_consumer_config}".strip()
        return compare_costs(args, "consumer_config", args.rounds, (args.consumer_config, more))
    if args.compare_producer_config:
        more = f"{args.producer_config} {args.compare_producer_config}".strip()
        return compare_costs(args, "producer_config", args.rounds, (args.producer_config, more))
    for option in COST_PAIRS:
        rounds = getattr(args, f"compare_{_compare_name(option).replace('-', '_')}")
        if rounds:
            return compare_costs(args, option, rounds)
    if args.compare_commit_overlap:
        return compare_commit_overlap(args)
    if args.compare_txn_backoff:
        return compare_txn_backoff(args)
    result = run(args)
    _print_run(args, result)
    out = args.out or RESULTS / f"e2e-{result['host'] or 'host'}-{args.backend}.json"
    _write(out, result)
    return 0 if _clean(result) else 1


def compare_commit_overlap(args: argparse.Namespace) -> int:
    """Pairs of runs, commit overlap off then on; the ratio of their busy-span rates."""

    def rate_ratio(off: dict[str, Any], on: dict[str, Any]) -> dict[str, float]:
        ratio = on["records_per_s"] / off["records_per_s"]
        print(f"commit overlap on / off: {ratio:.2f}x over the busy span")
        return {"ratio_on_to_off": round(ratio, 3)}

    out = args.out or RESULTS / f"e2e-commit-overlap-{platform.node() or 'host'}-{args.backend}.json"
    return paired_overlap_runs(args, _run_and_print, rate_ratio, out)


def compare_txn_backoff(args: argparse.Namespace) -> int:
    """Pairs of runs, the transactions' retry backoff at librdkafka's 100 ms then the worker's; the rate ratio."""

    def rate_ratio(base: dict[str, Any], new: dict[str, Any]) -> dict[str, float]:
        ratio = new["records_per_s"] / base["records_per_s"]
        print(f"txn retry backoff {new['txn_retry_backoff_ms']} ms / {base['txn_retry_backoff_ms']} ms: "
              f"{ratio:.2f}x over the busy span")  # fmt: skip
        return {"ratio_to_baseline": round(ratio, 3)}

    out = args.out or RESULTS / f"e2e-txn-backoff-{platform.node() or 'host'}-{args.backend}.json"
    return paired_runs(
        args, _run_and_print, rate_ratio, out, "txn_retry_backoff_ms", BACKOFF_PAIR, args.compare_txn_backoff
    )


PARTITION_BY_PAIR = ("key", "source")
"""``--compare-partition-by``'s ``--partition-by``: by key (the baseline), then the worker's default."""
FETCH_BACKOFF_PAIR = (1000, FETCH_QUEUE_BACKOFF_MS)
"""``--compare-fetch-backoff``'s ``--fetch-backoff-ms``: librdkafka's default (the baseline), then the worker's."""
COST_PAIRS = {
    "compression": ("lz4", "none"),
    "partition_by": PARTITION_BY_PAIR,
    "fetch_backoff_ms": FETCH_BACKOFF_PAIR,
    "lane_order": ("arrival", "balanced"),
    "device_wait": ("driver", "block"),
    "kafka_reader": ("objects", "packed"),
    "kafka_writer": ("objects", "packed"),
    "load_write_back": ("off", "on"),
}
"""Per option a ``--compare-…`` pair sets: its baseline value, then the other one."""


def _compare_name(option: str) -> str:
    """The ``--compare-…`` name of a :data:`COST_PAIRS` option (``fetch_backoff_ms``: ``fetch-backoff``)."""
    return option.removesuffix("_ms").replace("_", "-")


def compare_costs(args: argparse.Namespace, option: str, rounds: int, pair: tuple[Any, Any] | None = None) -> int:
    """``rounds`` pairs of runs, ``option`` at ``pair`` (baseline first); the ratios of rate and CPU.

    ``pair`` defaults to the option's :data:`COST_PAIRS` values.

    ``compression`` sets the raw and the typed records' compression, ``partition_by`` where the
    workers write typed and dead-letter records, ``fetch_backoff_ms`` how long their consumers stop
    fetching once their prefetch queue is full, ``lane_order`` and ``device_wait`` the GPU workers'
    device lane order and wait, ``kafka_reader`` how the workers read raw records, ``kafka_writer`` how they
    produce typed rows, ``load_write_back`` whether the load is on disk before the workers get it;
    ``consumer_config``, ``producer_config`` and ``worker_tree`` come with the pair the command line gave.
    """
    name = _compare_name(option)
    out = args.out or RESULTS / f"e2e-{name}-{platform.node() or 'host'}-{args.backend}.json"
    return paired_runs(args, _run_and_print, cost_ratios, out, option, pair or COST_PAIRS[option], rounds)


def cost_ratios(base: dict[str, Any], new: dict[str, Any]) -> dict[str, float]:
    """``new`` over ``base``: busy-span rate, workers' and broker's CPU per record (where both measured them)."""
    keys = {"rate_ratio": "records_per_s", "workers_cpu_ratio": "workers_cpu_us_per_record",
            "broker_cpu_ratio": "broker_cpu_us_per_record"}  # fmt: skip
    ratios = {name: round(new[key] / base[key], 3) for name, key in keys.items() if new.get(key) and base.get(key)}
    compared = (*COST_PAIRS, "consumer_config", "producer_config", "worker_revision", "native_library")
    changed = [k for k in compared if new.get(k) != base.get(k)]
    print(", ".join(f"{k} {new[k]} / {base[k]}" for k in changed) + f": {ratios}")
    return ratios


def _run_and_print(run_args: argparse.Namespace) -> dict[str, Any]:
    result = run(run_args)
    _print_run(run_args, result)
    return result


BACKOFF_PAIR = (100, TXN_RETRY_BACKOFF_MS)
"""``--compare-txn-backoff``'s ``--txn-retry-backoff-ms``: librdkafka's default (the baseline), then the worker's."""


def paired_overlap_runs(
    args: argparse.Namespace,
    run_once: Callable[[argparse.Namespace], dict[str, Any]],
    compare: Callable[[dict[str, Any], dict[str, Any]], dict[str, float]],
    out: Path,
) -> int:
    """Paired runs, ``--commit-overlap off`` (the baseline) then ``on``, with ``compare``'s figures.

    ``args.compare_commit_overlap`` pairs, on fresh topics, in one process; written to ``out``.
    """
    return paired_runs(args, run_once, compare, out, "commit_overlap", ("off", "on"), args.compare_commit_overlap)


def paired_runs(
    args: argparse.Namespace,
    run_once: Callable[[argparse.Namespace], dict[str, Any]],
    compare: Callable[[dict[str, Any], dict[str, Any]], dict[str, float]],
    out: Path,
    option: str,
    values: tuple[Any, Any],
    rounds: int,
) -> int:
    """``rounds`` pairs of runs, ``option`` at ``values[0]`` (the baseline) then ``values[1]``.

    Each run on fresh topics, all in one process; each pair with ``compare``'s figures, written to
    ``out`` (the pair's runs under the values' names).
    """
    pairs: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    base_name, new_name = (str(v) for v in values)
    for _ in range(rounds):
        base = run_once(argparse.Namespace(**{**vars(args), option: values[0]}))
        new = run_once(argparse.Namespace(**{**vars(args), option: values[1]}))
        pairs.append({base_name: base, new_name: new, **compare(base, new)})
        runs += [base, new]
    _write(out, {"baseline": f"--{option.replace('_', '-')} {base_name}", "pairs": pairs})
    return 0 if all(map(_clean, runs)) else 1


def _print_run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    body = result.get("corpus", {})
    print(f"{result['records']:,} records ({body.get('config', {}).get('corpus', 'generated')} corpus, "
          f"mean {body.get('mean_body_bytes')} B), {args.workers} x gpu_stage --backend {args.backend} "
          f"--commit-overlap {args.commit_overlap}, {args.partitions} partitions: "
          f"{result['records_per_s']:,.0f} records/s over the busy span ({result['busy_span_seconds']} s), "
          f"{result['records_per_s_wall']:,.0f}/s over the whole {result['wall_seconds']} s; "
          f"exactly once: {result['exactly_once']} {result['check']}")
    threads = result.get("workers_cpu_us_per_record_by_thread")
    if threads:
        print(f"workers' CPU µs per record {result['workers_cpu_us_per_record']}, by thread: "
              + " ".join(f"{name}={us}" for name, us in threads.items()))
    steps = mean_steps(result.get("per_worker", []))
    if steps:
        print("ms per batch, the workers' mean: " + " ".join(f"{name}={ms}" for name, ms in steps.items()))
    stages = mean_backend_stages(result.get("per_worker", []))
    if stages:
        print("the backend's ms per batch, the workers' mean: " + " ".join(f"{k}={ms}" for k, ms in stages.items()))


def _write(out: Path, result: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out}")


def _clean(result: dict[str, Any]) -> bool:
    return bool(result["exactly_once"]) and not any(result["exit_codes"])


if __name__ == "__main__":
    raise SystemExit(main())
