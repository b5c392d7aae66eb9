"""What every ``python -m jobs.<name>`` shares: one frozen settings object, its options, and ``run``.

Options fall back to environment variables (shown in ``--help``). Modes: streaming on an embedded
mini-cluster by default; ``--until latest`` makes the sources bounded (tests, backfills) so the job ends
when it has read what was in the topic at start; under ``flink run`` the same code is submitted to the
cluster (``--no-jars`` when the cluster's ``lib/`` already has the connector jars, see jobs/README.md).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.flink_env import FlinkSettings, execute, table_env
from jobs.sinks import DEFAULT_FEATURES_TOPIC, SinkSettings
from jobs.typed_table import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_WATERMARK_DELAY_S,
    EventTime,
    ReadRange,
    TopicSource,
)
from llmpipe.errors import PipelineError
from llmpipe.kafka_io import KafkaSettings
from llmpipe.record import TypedRecord
from llmpipe.runtime import configure_logging
from llmpipe.settings import env_option, parse_args

log = logging.getLogger(__name__)

DEFAULT_TYPED_BASE = "llm.typed"
DEFAULT_DLQ_TOPIC = "llm.dlq"


@dataclass(frozen=True)
class JobSettings:
    """Everything a job needs: its input topics, sink, Flink runtime and the typed record definition."""

    typed: TopicSource
    sink: SinkSettings = field(default_factory=SinkSettings)
    flink: FlinkSettings = field(default_factory=FlinkSettings)
    record: TypedRecord = field(default_factory=TypedRecord.from_file)
    dlq: TopicSource | None = None


BuildJob = Callable[[Any, JobSettings], Any]


def parser(prog: str, description: str | None, *, with_sink: bool = True) -> argparse.ArgumentParser:
    """The shared options (Kafka, typed topic, range, watermark, sink, Flink)."""
    p = argparse.ArgumentParser(prog=f"python -m {prog}", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    KafkaSettings.add_options(p, "JOBS")
    env_option(p, "--content-schema", "CONTENT_SCHEMA", help="content JSON Schema file (bundled default)")
    env_option(p, "--typed-topic", "TYPED_TOPIC",
               help=f"typed topic (default: {DEFAULT_TYPED_BASE}.<schema fingerprint>, as gpu_stage writes)")
    env_option(p, "--from", "JOBS_FROM", default="group", dest="start",
               help="earliest, latest, group (committed offsets) or timestamp:<epoch ms>")
    env_option(p, "--until", "JOBS_UNTIL", default="none",
               help="none (streaming), latest (bounded: stop at the end seen at start) or timestamp:<ms>")
    env_option(p, "--group-id", "JOBS_GROUP_ID", default=f"llmpipe-{prog.rsplit('.', 1)[-1]}",
               help="Kafka consumer group (offsets committed on checkpoints)")
    env_option(p, "--watermark-delay", "JOBS_WATERMARK_DELAY_S", default=DEFAULT_WATERMARK_DELAY_S, type=int,
               help="bounded out-of-orderness of created, seconds (see jobs/typed_table.py)")
    env_option(p, "--idle-timeout", "JOBS_IDLE_TIMEOUT_S", default=DEFAULT_IDLE_TIMEOUT_S, type=int,
               help="seconds after which a silent partition stops holding back the watermark")
    p.add_argument("--watermark-on-event", action="store_true",
                   help="emit a watermark per record (deterministic late-record drops; slower)")
    if with_sink:
        env_option(p, "--features-topic", "FEATURES_TOPIC", default=DEFAULT_FEATURES_TOPIC,
                   help="output topic (JSON value, entity as key)")
        p.add_argument("--print", action="store_true", dest="print_rows",
                       help="print rows to stdout instead of writing the topic")
    env_option(p, "--parallelism", "JOBS_PARALLELISM", default=1, type=int, help="Flink parallelism")
    env_option(p, "--checkpoint-interval-ms", "JOBS_CHECKPOINT_INTERVAL_MS", default=60000, type=int,
               help="checkpoint interval (commits consumer offsets; 0 disables)")
    p.add_argument("--no-jars", action="store_true",
                   help="do not add the local connector jars (a cluster whose lib/ already has them)")
    return p


def settings_from_args(args: argparse.Namespace) -> JobSettings:
    """Build the frozen settings from parsed options."""
    kafka = KafkaSettings.from_args(args)
    record = TypedRecord.from_file(args.content_schema)
    read = ReadRange(start=args.start, until=args.until, group_id=args.group_id)
    event_time = EventTime(args.watermark_delay, args.idle_timeout, args.watermark_on_event)
    typed = TopicSource(kafka, args.typed_topic or record.versioned_topic(DEFAULT_TYPED_BASE), read, event_time)
    dlq_topic = getattr(args, "dlq_topic", None)
    dlq = TopicSource(kafka, dlq_topic, read, event_time) if dlq_topic else None
    sink = SinkSettings(getattr(args, "features_topic", DEFAULT_FEATURES_TOPIC),
                        getattr(args, "print_rows", False))
    flink = FlinkSettings(streaming=True, parallelism=args.parallelism,
                          checkpoint_interval_ms=args.checkpoint_interval_ms or None,
                          load_jars=not args.no_jars)
    return JobSettings(typed=typed, sink=sink, flink=flink, record=record, dlq=dlq)


def run(build_job: BuildJob, p: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse options, build the job on a fresh TableEnvironment, run it; 0 on success, 1 on failure."""
    configure_logging("INFO")
    args = parse_args(p, argv)
    try:
        settings = settings_from_args(args)
        log.info("reading %s (from=%s until=%s), parallelism %d", settings.typed.topic,
                 settings.typed.read.start, settings.typed.read.until, settings.flink.parallelism)
        execute(build_job(table_env(settings.flink), settings))
    except PipelineError as exc:
        log.error("%s: %s", p.prog, exc)
        return 1
    return 0
