"""``python -m stack up|down|status|jars|flink-up|flink-down``: the local Kafka broker and Flink, no Docker needed.

``flink-up`` starts a standalone Flink cluster in ``<dir>/flink`` from the PyFlink wheel's distribution
(``stack.flink``); ``flink-down`` stops it. ``registry-up`` starts a schema registry with a Confluent-compatible
API in ``<dir>/registry`` (``stack.registry``, in memory); ``registry-down`` stops it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from llmpipe.errors import ConfigError, PipelineError
from llmpipe.kafka_io import KafkaSettings, create_topics
from llmpipe.runtime import configure_logging
from llmpipe.settings import (
    Bounded,
    Checked,
    Refused,
    env_option,
    non_empty,
    non_negative_int,
    parse_args,
    port_or_any,
    positive_int,
    topic_name,
)
from stack import broker, jars

DEFAULT_TOPICS = "llm.requests:4,llm.raw:8,llm.dlq:8,llm.features:1"
MIN_HEAP_MB = 128
"""Least broker heap accepted (the default is 512): with a few MB the broker cannot start, and ``up`` would
only see it never answer."""


def _topics(spec: str) -> dict[str, int]:
    """``name:partitions,…`` (partitions default to 1) → partition count per topic; ``ValueError`` if malformed."""
    topics = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, count = item.partition(":")
        partitions = int(count) if sep else 1
        if partitions < 1:
            msg = f"{name}: partitions must be >= 1"
            raise ValueError(msg)
        try:
            topics[topic_name(name)] = partitions
        except Refused as exc:
            raise ValueError(str(exc)) from exc
    return topics


topic_spec = Checked("name:partitions,… (topic names, partitions >= 1)", _topics)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stack", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status", "jars", "flink-up", "flink-down",
                                            "registry-up", "registry-down"])
    env_option(parser, "--dir", "STACK_DIR", default=".stack", type=non_empty,
               help="run folder (config, data, pid, logs)")
    env_option(parser, "--port", "STACK_KAFKA_PORT", default=19092, type=port_or_any,
               help="broker client port (0-65535; 0: the run folder's last port, else a free one)")
    env_option(parser, "--topics", "STACK_TOPICS", default=DEFAULT_TOPICS, type=topic_spec,
               help="topics to create on up, as name:partitions,…")
    env_option(parser, "--heap-mb", "STACK_KAFKA_HEAP_MB", default=512, type=Bounded(int, MIN_HEAP_MB),
               help=f"broker JVM heap (>= {MIN_HEAP_MB})")
    parser.add_argument("--full-jit", action="store_true",
                        help="let the broker's JVM optimize fully (throughput runs; slower start)")
    env_option(parser, "--gc-pause-ms", "STACK_KAFKA_GC_PAUSE_MS", default=broker.GC_PAUSE_MS, type=positive_int,
               help="the broker's G1 pause-time goal (-XX:MaxGCPauseMillis, >= 1; Kafka's scripts use 20, the JVM 200)")
    env_option(parser, "--network-threads", "STACK_KAFKA_NETWORK_THREADS", default=broker.NETWORK_THREADS,
               type=Bounded(int, 1, 64), help="the broker's num.network.threads (1-64; Kafka's default 3)")
    env_option(parser, "--io-threads", "STACK_KAFKA_IO_THREADS", default=broker.IO_THREADS,
               type=Bounded(int, 1, 64), help="the broker's num.io.threads (1-64; Kafka's default 8)")
    parser.add_argument("--rebalance-delay-ms", type=non_negative_int, default=0,
                        help="group.initial.rebalance.delay.ms (0 for tests; Kafka's default is 3000)")
    parser.add_argument("--wipe", action="store_true", help="on down, also delete the data folder")
    env_option(parser, "--flink-slots", "STACK_FLINK_SLOTS", default=2, type=positive_int,
               help="flink-up: task slots of the TaskManager (>= 1)")
    env_option(parser, "--registry-port", "STACK_REGISTRY_PORT", default=18081, type=port_or_any,
               help="registry-up: the schema registry's HTTP port (0: a free one)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one stack command; exit 0 on success, 2 on a bad option (one line), 1 on a failure."""
    configure_logging("INFO")
    try:
        args = parse_args(_parser(), argv)
    except ConfigError as exc:
        print(f"stack: {exc}", file=sys.stderr)
        return 2
    root = Path(args.dir).resolve()
    try:
        return _run(args, root)
    except PipelineError as exc:
        print(f"stack: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, root: Path) -> int:
    if args.command.startswith("flink-"):
        return _flink(args, root / "flink")
    if args.command.startswith("registry-"):
        return _registry(args, root / "registry")
    if args.command == "jars":
        for name in ("kafka", "flink", "sql-client"):
            print(f"{name}: {jars.jar_dir(name)} ({jars.size_mib(name):.1f} MiB)")
        from stack import registry

        print(f"schema registry: {registry.build_dir()}")
        return 0
    if args.command == "up":
        started = time.monotonic()
        run = broker.start(root, args.port, heap_mb=args.heap_mb, full_jit=args.full_jit,
                           rebalance_delay_ms=args.rebalance_delay_ms, gc_pause_ms=args.gc_pause_ms,
                           network_threads=args.network_threads, io_threads=args.io_threads)
        topics = args.topics
        if topics:
            create_topics(KafkaSettings(bootstrap=run.bootstrap()), topics)
        print(f"kafka up at {run.bootstrap()} pid={run.pid()} in {time.monotonic() - started:.1f}s")
        return 0
    if args.command == "down":
        stopped = broker.stop(root)
        if args.wipe:
            shutil.rmtree(root, ignore_errors=True)
        print("kafka stopped" if stopped else "kafka was not running")
        return 0
    run = broker.BrokerDir(root)
    pid = run.pid()
    print(f"kafka running at {run.bootstrap()} pid={pid}" if pid else "kafka not running")
    return 0 if pid else 3


def _registry(args: argparse.Namespace, root: Path) -> int:
    """``registry-up``/``registry-down``: the local schema registry (in memory) in ``<dir>/registry``."""
    from stack import registry

    if args.command == "registry-up":
        run = registry.start(root, args.registry_port or None)
        print(f"schema registry up: --schema-registry-url {run.url()} (pid={run.pid()})")
        return 0
    stopped = registry.stop(root)
    if args.wipe:
        shutil.rmtree(root, ignore_errors=True)
    print("schema registry stopped" if stopped else "schema registry was not running")
    return 0


def _flink(args: argparse.Namespace, root: Path) -> int:
    from stack import flink

    if args.command == "flink-up":
        run = flink.start(root, slots=args.flink_slots)
        print(f"flink up at {run.rest_url()} (jobmanager pid={run.jobmanager_pid()}, "
              f"taskmanager pids={run.taskmanager_pids()}); FLINK_CONF_DIR={run.conf_dir} FLINK_LIB_DIR={run.lib_dir}")
        return 0
    stopped = flink.stop(root)
    if args.wipe:
        shutil.rmtree(root, ignore_errors=True)
    print("flink stopped" if stopped else "flink was not running")
    return 0


if __name__ == "__main__":
    sys.exit(main())
