"""``python -m bench.e2e_worker``: raw → typed through a real broker, K gpu_stage workers in one group.

Loads N generated raw records (``gpu_stage.synth`` bodies, unique keys, the connector's headers) into
a fresh raw topic of P partitions (not timed), starts K ``python -m gpu_stage`` workers in one
consumer group (one Kafka transaction per batch, ``read_committed``, ``--exit-when-idle``), waits for
them, and then checks that the ``read_committed`` typed and DLQ topics hold every key exactly once.

The rate is over the busy span: from the earliest first input record of any worker to the latest
last commit, both taken from the workers' closing ``summary:`` lines (wall clock, same host), so
process start-up and the idle wait before exit are not counted; the whole wall time is reported too.
Not a test: the figures depend on the host, the broker and their neighbours.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_stage import synth
from llmpipe.kafka_io import KafkaSettings, Producer, create_topics, delete_topics, read_topic
from llmpipe.record import TypedRecord

log = logging.getLogger("bench.e2e_worker")

RESULTS = Path(__file__).resolve().parent / "results"
SUMMARY = re.compile(r"summary: in=(\d+) typed=(\d+) dlq=(\d+) batches=(\d+) aborts=(\d+) "
                     r"first_input_at=([\d.]+) last_commit_at=([\d.]+) busy_rate=(\d+)")
HEADERS = [("latency.ms", b"180"), ("attributes", b'{"arm":"a","user":"u1"}')]
TOPIC_CONFIG = {"max.message.bytes": str(64 << 20)}


def load_raw(kafka: KafkaSettings, topic: str, records: int, partitions: int, pool: int) -> float:
    """Write ``records`` raw records (bodies cycled from a generated pool); return the seconds it took."""
    create_topics(kafka, {topic: partitions}, TOPIC_CONFIG)
    bodies = synth.bodies(min(records, pool))
    producer = Producer(kafka, {"linger.ms": 50, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000})
    started = time.perf_counter()
    for i in range(records):
        producer.produce(topic, bodies[i % len(bodies)], f"req-{i:09d}".encode(), HEADERS)
        if i % 50_000 == 0:
            producer.poll(0)
    producer.flush(300)
    return time.perf_counter() - started


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
    partitions = {topics.typed: args.partitions, topics.dlq: 1}
    if with_raw:
        partitions[topics.raw] = args.partitions
    create_topics(kafka, partitions, TOPIC_CONFIG)
    topics.logs.mkdir(parents=True, exist_ok=True)
    return topics


def start_workers(args: argparse.Namespace, raw: str, typed_base: str, dlq: str, logs: Path) -> list[Any]:
    """K worker processes in one group, each with its own transactional id and log file."""
    group = f"bench-e2e-{uuid.uuid4().hex[:8]}"
    procs = []
    for k in range(args.workers):
        command = [
            sys.executable, "-m", "gpu_stage", "--bootstrap", args.bootstrap, "--raw-topic", raw,
            "--typed-topic", typed_base, "--dlq-topic", dlq, "--group-id", group,
            "--transactional-id", f"{group}-{k}", "--backend", args.backend,
            "--batch-records", str(args.batch_records), "--batch-wait-ms", str(args.batch_wait_ms),
            "--exit-when-idle", str(args.idle_s),
            "--gpu-pool-bytes", str(args.gpu_pool_bytes),
        ]  # fmt: skip
        out = open(logs / f"worker-{k}.log", "wb")  # noqa: SIM115 - closed after the process exits
        procs.append((subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT), out))
    return procs


def wait_workers(procs: list[Any]) -> list[int]:
    """Wait for every worker, close its log file; their exit codes."""
    codes = [p.wait() for p, _ in procs]
    for _, out in procs:
        out.close()
    return codes


def summaries(logs: Path, workers: int) -> list[dict[str, float]]:
    """Each worker's closing summary line, parsed."""
    keys = ("in", "typed", "dlq", "batches", "aborts", "first_input_at", "last_commit_at", "busy_rate")
    out = []
    for k in range(workers):
        text = (logs / f"worker-{k}.log").read_text(errors="replace")
        found = SUMMARY.findall(text)
        if not found:
            msg = f"worker {k} wrote no summary line; see {logs / f'worker-{k}.log'}"
            raise SystemExit(msg)
        out.append(dict(zip(keys, map(float, found[-1]), strict=True)))
    return out


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


def common_result(
    args: argparse.Namespace, codes: list[int], per_worker: list[dict[str, float]], check: dict[str, int]
) -> dict[str, Any]:
    """The result fields every end-to-end run reports: host, setup, exit codes, workers, key check."""
    return {
        "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "backend": args.backend, "workers": args.workers, "partitions": args.partitions,
        "records": args.records, "batch_records": args.batch_records, "batch_wait_ms": args.batch_wait_ms,
        "exit_codes": codes, "per_worker": per_worker, "check": check,
        "exactly_once": check["missing"] == 0 and check["duplicates"] == 0 and check["unexpected"] == 0,
    }  # fmt: skip


def add_run_options(p: argparse.ArgumentParser, *, records: int, batch_records: int, batch_wait_ms: int) -> None:
    """Options every end-to-end run takes: broker, load size, workers and their batching, logs, topics."""
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:19092"))
    p.add_argument("--records", type=int, default=records)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--backend", default="cpu", choices=["cpu", "gpu", "reference"])
    p.add_argument("--batch-records", type=int, default=batch_records)
    p.add_argument("--batch-wait-ms", type=int, default=batch_wait_ms, help="workers close a batch after this long")
    p.add_argument("--idle-s", type=float, default=5.0, help="workers exit after this long without input")
    p.add_argument("--gpu-pool-bytes", type=int, default=4 << 30)
    p.add_argument("--logs", type=Path, default=Path(".bench-e2e"), help="worker logs go below this folder")
    p.add_argument("--keep-topics", action="store_true")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Load, process, check; the result dictionary."""
    kafka = KafkaSettings(bootstrap=args.bootstrap)
    topics = fresh_topics(kafka, args, with_raw=False)
    try:
        load_s = load_raw(kafka, topics.raw, args.records, args.partitions, args.pool)
        log.info("loaded %d raw records into %s in %.1fs", args.records, topics.raw, load_s)
        started = time.time()
        codes = wait_workers(start_workers(args, topics.raw, topics.typed_base, topics.dlq, topics.logs))
        wall = time.time() - started
        per_worker = summaries(topics.logs, args.workers)
        busy = [w for w in per_worker if w["in"] > 0]  # a worker that got no input has no span
        span = max(w["last_commit_at"] for w in busy) - min(w["first_input_at"] for w in busy)
        check = check_keys(kafka, topics.typed, topics.dlq, args.records)
    finally:
        if not args.keep_topics:
            delete_topics(kafka, topics.all())
    return {
        **common_result(args, codes, per_worker, check), "load_seconds": round(load_s, 2),
        "wall_seconds": round(wall, 2), "busy_span_seconds": round(span, 3),
        "records_per_s": round(args.records / span, 1), "records_per_s_wall": round(args.records / wall, 1),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run once, print the figures, write the JSON result."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    p = argparse.ArgumentParser(prog="python -m bench.e2e_worker", description=__doc__)
    add_run_options(p, records=200_000, batch_records=20_000, batch_wait_ms=200)
    p.add_argument("--pool", type=int, default=100_000, help="distinct bodies generated (then cycled)")
    p.add_argument("--out", type=Path, default=None,
                   help="result JSON (default bench/results/e2e-<host>-<backend>.json)")
    args = p.parse_args(argv)
    result = run(args)
    print(f"{result['records']:,} records, {args.workers} x gpu_stage --backend {args.backend}, "
          f"{args.partitions} partitions: {result['records_per_s']:,.0f} records/s over the busy span "
          f"({result['busy_span_seconds']} s), {result['records_per_s_wall']:,.0f}/s over the whole "
          f"{result['wall_seconds']} s; exactly once: {result['exactly_once']} {result['check']}")
    out = args.out or RESULTS / f"e2e-{result['host'] or 'host'}-{args.backend}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out}")
    return 0 if result["exactly_once"] and not any(result["exit_codes"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
