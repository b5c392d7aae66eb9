"""What every ``python -m jobs.<name>`` shares: one frozen settings object, its options, and ``run``.

Options fall back to ``JOBS_*`` environment variables (shown in ``--help``; the Kafka connection to the
shared ``KAFKA_*``). The unprefixed names some had before (``CONTENT_SCHEMA``, ``TYPED_TOPIC``,
``FEATURES_TOPIC``) are still honoured, with a warning, while the new one is unset.

Modes: streaming on an embedded mini-cluster by default; ``--until latest`` makes the sources bounded
(tests, backfills) so the job ends when it has read what was in the topic at start; under ``flink run``
the same code is submitted to the cluster (``--no-jars`` when the cluster's ``lib/`` already has the
connector jars, see jobs/README.md).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.flink_env import FlinkSettings, JobCancelled, execute, table_env
from jobs.sinks import DEFAULT_FEATURES_TOPIC, DEFAULT_TRANSACTION_TIMEOUT_MS, EXACTLY_ONCE, GUARANTEES, SinkSettings
from jobs.typed_table import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_WATERMARK_DELAY_S,
    EventTime,
    ReadRange,
    TopicSource,
)
from llmpipe.errors import ConfigError, PipelineError
from llmpipe.kafka_io import KafkaSettings
from llmpipe.record import TypedRecord
from llmpipe.registry import registry_url
from llmpipe.runtime import configure_logging
from llmpipe.settings import (
    Bounded,
    Checked,
    check_kafka_options,
    env_option,
    non_empty,
    non_negative_int,
    parse_args,
    positive_int,
    topic_name,
)

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

    @property
    def content_schema(self) -> dict[str, Any]:
        """The content JSON Schema (``--content-schema``), under the name every service's settings use.

        Read from :attr:`record`, which was built from it, so the two cannot disagree.
        """
        return self.record.content_schema


BuildJob = Callable[[Any, JobSettings], Any]
BuildJobWithArgs = Callable[[Any, JobSettings, argparse.Namespace], Any]
"""A job that also reads options of its own from the parsed namespace."""

checkpoint_interval = Bounded(int, 10, or_zero=True)
"""Flink refuses checkpoint intervals under 10 ms (when the job is submitted, long after start)."""
sink_guarantee = Checked(" or ".join(GUARANTEES), lambda text: GUARANTEES[GUARANTEES.index(text)])
"""``--sink-guarantee``: refused as one line naming the option (``ValueError`` from ``index``), like other values."""
EXIT_INTERRUPTED = 130
"""Exit status after ctrl-C (SIGINT) cancelled the job this client waited for (128 + SIGINT, as shells report)."""
FROM_VALUES = "earliest, latest, group or timestamp:<epoch ms>"
UNTIL_VALUES = "none, latest or timestamp:<epoch ms>"


def parser(prog: str, description: str | None, *, with_sink: bool = True) -> argparse.ArgumentParser:
    """The shared options (Kafka, typed topic, range, watermark, sink, Flink)."""
    p = argparse.ArgumentParser(prog=f"python -m {prog}", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    KafkaSettings.add_options(p, "JOBS")
    env_option(p, "--content-schema", "JOBS_CONTENT_SCHEMA", old_envs=["CONTENT_SCHEMA"],
               help="content JSON Schema file (bundled default)")
    env_option(p, "--typed-topic", "JOBS_TYPED_TOPIC", old_envs=["TYPED_TOPIC"], type=topic_name,
               help=f"typed topic (default: {DEFAULT_TYPED_BASE}.<schema fingerprint>, as gpu_stage writes)")
    env_option(p, "--schema-registry-url", "JOBS_SCHEMA_REGISTRY_URL", type=registry_url,
               help="the typed topic is in the Confluent wire format (gpu_stage --schema-registry-url): read it "
               "with Flink's avro-confluent format and this registry (credentials as https://user:password@host); "
               "unset: plain Avro")
    env_option(p, "--from", "JOBS_FROM", default="group", dest="start",
               help="earliest, latest, group (committed offsets) or timestamp:<epoch ms>")
    env_option(p, "--until", "JOBS_UNTIL", default="none",
               help="none (streaming), latest (bounded: stop at the end seen at start) or timestamp:<ms>")
    env_option(p, "--group-id", "JOBS_GROUP_ID", default=f"llmpipe-{prog.rsplit('.', 1)[-1]}", type=non_empty,
               help="Kafka consumer group (offsets committed on checkpoints)")
    env_option(p, "--watermark-delay", "JOBS_WATERMARK_DELAY_S", default=DEFAULT_WATERMARK_DELAY_S,
               type=non_negative_int, help="bounded out-of-orderness of created, seconds (see jobs/typed_table.py)")
    env_option(p, "--idle-timeout", "JOBS_IDLE_TIMEOUT_S", default=DEFAULT_IDLE_TIMEOUT_S, type=positive_int,
               help="seconds after which a silent partition stops holding back the watermark (>= 1: with 0 "
               "it never does, and windows wait for it forever)")
    p.add_argument("--watermark-on-event", action="store_true",
                   help="emit a watermark per record (deterministic late-record drops; slower)")
    if with_sink:
        env_option(p, "--features-topic", "JOBS_FEATURES_TOPIC", old_envs=["FEATURES_TOPIC"],
                   default=DEFAULT_FEATURES_TOPIC, type=topic_name, help="output topic (JSON value, entity as key)")
        p.add_argument("--print", action="store_true", dest="print_rows",
                       help="print rows to stdout instead of writing the topic")
        env_option(p, "--sink-guarantee", "JOBS_SINK_GUARANTEE", default=EXACTLY_ONCE, type=sink_guarantee,
                   help="exactly-once (Kafka transactions committed on checkpoints; readers must use "
                   "isolation.level=read_committed) or at-least-once (see jobs/sinks.py)")
        env_option(p, "--transaction-timeout-ms", "JOBS_TRANSACTION_TIMEOUT_MS", default=DEFAULT_TRANSACTION_TIMEOUT_MS,
                   type=positive_int, help="exactly-once: the sink's transaction.timeout.ms (<= the broker's "
                   "transaction.max.timeout.ms)")
    p.set_defaults(job_name=f"llmpipe.{prog.rsplit('.', 1)[-1]}")
    env_option(p, "--detach", "JOBS_DETACH", default=False, action="store_true",
               help="return once the job is submitted (as under flink run --detached) instead of waiting for it")
    env_option(p, "--parallelism", "JOBS_PARALLELISM", default=1, type=positive_int, help="Flink parallelism (>= 1)")
    env_option(p, "--checkpoint-interval-ms", "JOBS_CHECKPOINT_INTERVAL_MS", default=60000, type=checkpoint_interval,
               help="checkpoint interval (commits consumer offsets; 0 disables, else >= 10)")
    p.add_argument("--no-jars", action="store_true",
                   help="do not add the local connector jars (a cluster whose lib/ already has them)")
    return p


def _check_range_word(flag: str, allowed: str, value: str, probe: ReadRange) -> None:
    """Refuse ``value`` now when ``probe`` (a range with it) cannot make its options."""
    try:
        probe.options()
    except ConfigError as exc:
        msg = f"{flag} must be {allowed}, not {value!r}"
        raise ConfigError(msg) from exc


def _read_range(args: argparse.Namespace) -> ReadRange:
    """``--from``/``--until`` checked now: the job would refuse them only once Flink's JVM has started."""
    _check_range_word("--from", FROM_VALUES, args.start, ReadRange(start=args.start, group_id="probe"))
    _check_range_word("--until", UNTIL_VALUES, args.until, ReadRange(start="earliest", until=args.until))
    return ReadRange(start=args.start, until=args.until, group_id=args.group_id)


def settings_from_args(args: argparse.Namespace) -> JobSettings:
    """Build the frozen settings from parsed options (value ranges were checked as they were parsed)."""
    check_kafka_options(args)
    kafka = KafkaSettings.from_args(args)
    record = TypedRecord.from_file(args.content_schema, "--content-schema")
    read = _read_range(args)
    event_time = EventTime(args.watermark_delay, args.idle_timeout, args.watermark_on_event)
    typed = TopicSource(kafka, args.typed_topic or record.versioned_topic(DEFAULT_TYPED_BASE), read, event_time,
                        schema_registry_url=args.schema_registry_url)
    dlq_topic = getattr(args, "dlq_topic", None)
    dlq = TopicSource(kafka, dlq_topic, read, event_time) if dlq_topic else None
    sink = _sink_settings(args)
    flink = FlinkSettings(streaming=True, parallelism=args.parallelism,
                          checkpoint_interval_ms=args.checkpoint_interval_ms or None,
                          load_jars=not args.no_jars, job_name=args.job_name, detach=args.detach)
    return JobSettings(typed=typed, sink=sink, flink=flink, record=record, dlq=dlq)


def _sink_settings(args: argparse.Namespace) -> SinkSettings:
    """The sink; a streaming job writing exactly-once into Kafka needs checkpoints.

    Its transactions commit on checkpoints, so without them a streaming job would never make a row
    visible. A bounded run (``--until`` other than ``none``) commits when its input ends, and may go
    without checkpoints.
    """
    topic = getattr(args, "features_topic", DEFAULT_FEATURES_TOPIC)
    print_rows = getattr(args, "print_rows", False)
    guarantee = getattr(args, "sink_guarantee", EXACTLY_ONCE)
    if guarantee == EXACTLY_ONCE and not print_rows and hasattr(args, "features_topic") \
            and not args.checkpoint_interval_ms and args.until == "none":
        msg = ("--sink-guarantee exactly-once commits on checkpoints: a streaming job needs "
               "--checkpoint-interval-ms > 0 (or --sink-guarantee at-least-once)")
        raise ConfigError(msg)
    return SinkSettings(topic, print_rows, guarantee=guarantee,
                        transactional_id_prefix=f"{args.job_name}.{topic}",
                        transaction_timeout_ms=getattr(args, "transaction_timeout_ms", DEFAULT_TRANSACTION_TIMEOUT_MS))


def check_kafka(settings: JobSettings, *, writes_sink: bool = True) -> None:
    """Before Flink starts: the cluster answers and every topic the job reads or writes exists.

    Flink's Kafka source waits silently for a topic that does not exist and for a cluster that does
    not answer, so a wrong name or address would otherwise look like a job with nothing to read. The
    jobs never create topics (partitions and replication are the cluster owner's choice). The check
    needs confluent-kafka; a Flink client with only apache-flink installed skips it with a warning.
    """
    try:
        from llmpipe.kafka_io.cluster import await_cluster, require_topic
    except ImportError:
        log.warning("confluent-kafka is not installed: not checking that the topics exist")
        return
    kafka = settings.typed.kafka
    await_cluster(kafka)
    require_topic(kafka, settings.typed.topic, "--typed-topic")
    if settings.dlq is not None:
        require_topic(kafka, settings.dlq.topic, "--dlq-topic")
    if writes_sink and not settings.sink.print_rows:
        try:
            require_topic(kafka, settings.sink.topic, "--features-topic")
        except ConfigError as exc:
            msg = (f"{exc}; the jobs do not create topics: create it first, e.g. kafka-topics.sh --create "
                   f"--topic {settings.sink.topic} --partitions 1 (see jobs/README.md)")
            raise ConfigError(msg) from exc


def run(build_job: BuildJob, p: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse options, build the job on a fresh TableEnvironment, run it; 0 on success, 1 on failure.

    Bad options: one line on stderr naming the option, exit 2, before Flink starts. A job cancelled from
    outside while waited for (``flink cancel``, REST) ends with one INFO line and exit 0; ctrl-C while
    waiting cancels the job and exits 130.
    """
    return run_with_args(lambda t_env, settings, _args: build_job(t_env, settings), p, argv)


def run_with_args(build_job: BuildJobWithArgs, p: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """:func:`run` for a job that reads options of its own from the parsed namespace."""
    configure_logging("INFO")
    try:
        args = parse_args(p, argv)
        settings = settings_from_args(args)
    except ConfigError as exc:
        sys.stderr.write(f"{p.prog.removeprefix('python -m ')}: {exc}\n")
        return 2
    try:
        check_kafka(settings, writes_sink=hasattr(args, "features_topic"))
    except ConfigError as exc:
        log.error("%s: %s", p.prog, exc)
        return 2
    except PipelineError as exc:
        log.error("%s: %s", p.prog, exc)
        return 1
    try:
        log.info("reading %s (from=%s until=%s), parallelism %d", settings.typed.topic,
                 settings.typed.read.start, settings.typed.read.until, settings.flink.parallelism)
        execute(build_job(table_env(settings.flink), settings, args))
    except JobCancelled as exc:
        log.info("%s: %s", p.prog, exc)
        return EXIT_INTERRUPTED if exc.interrupted else 0
    except PipelineError as exc:
        log.error("%s: %s", p.prog, exc)
        return 1
    return 0
