"""``python -m stack up|down|status|jars``: the local Kafka broker and Flink jars, no Docker needed."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from llmpipe.errors import PipelineError
from llmpipe.kafka_io import KafkaSettings, create_topics
from llmpipe.runtime import configure_logging
from llmpipe.settings import env_option
from stack import broker, jars

DEFAULT_TOPICS = "llm.requests:4,llm.raw:8,llm.dlq:8,llm.features:1"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stack", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status", "jars"])
    env_option(parser, "--dir", "STACK_DIR", default=".stack", help="run folder (config, data, pid, logs)")
    env_option(parser, "--port", "STACK_KAFKA_PORT", default=19092, type=int, help="broker client port")
    env_option(parser, "--topics", "STACK_TOPICS", default=DEFAULT_TOPICS,
               help="topics to create on up, as name:partitions,…")
    env_option(parser, "--heap-mb", "STACK_KAFKA_HEAP_MB", default=512, type=int, help="broker JVM heap")
    parser.add_argument("--full-jit", action="store_true",
                        help="let the broker's JVM optimize fully (throughput runs; slower start)")
    env_option(parser, "--gc-pause-ms", "STACK_KAFKA_GC_PAUSE_MS", default=broker.GC_PAUSE_MS, type=int,
               help="the broker's G1 pause-time goal (-XX:MaxGCPauseMillis; Kafka's scripts use 20, the JVM 200)")
    parser.add_argument("--rebalance-delay-ms", type=int, default=0,
                        help="group.initial.rebalance.delay.ms (0 for tests; Kafka's default is 3000)")
    parser.add_argument("--wipe", action="store_true", help="on down, also delete the data folder")
    return parser


def _topics(spec: str) -> dict[str, int]:
    pairs = (item.split(":") for item in spec.split(",") if item)
    return {name: int(parts or 1) for name, parts in pairs}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one stack command; exit 0 on success."""
    configure_logging("INFO")
    args = _parser().parse_args(argv)
    root = Path(args.dir).resolve()
    try:
        return _run(args, root)
    except PipelineError as exc:
        print(f"stack: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, root: Path) -> int:
    if args.command == "jars":
        for name in ("kafka", "flink"):
            print(f"{name}: {jars.jar_dir(name)} ({jars.size_mib(name):.1f} MiB)")
        return 0
    if args.command == "up":
        started = time.monotonic()
        run = broker.start(root, args.port, heap_mb=args.heap_mb, full_jit=args.full_jit,
                           rebalance_delay_ms=args.rebalance_delay_ms, gc_pause_ms=args.gc_pause_ms)
        topics = _topics(args.topics)
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


if __name__ == "__main__":
    sys.exit(main())
