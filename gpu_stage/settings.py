"""The worker's one frozen settings object, filled from CLI options that fall back to env vars."""

from __future__ import annotations

import argparse
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpu_stage.transform.api import (
    DEFAULT_POOL_BYTES,
    DEVICE_WAITS,
    LANE_ORDERS,
    LANE_REGISTERS,
    LANE_REGISTERS_DEFAULT,
    LANE_SLOTS,
    LANE_SLOTS_DEFAULT,
    DeviceWait,
    LaneOrder,
    default_kernel_cache,
)
from llmpipe.content_schema import load_content_schema
from llmpipe.errors import ConfigError
from llmpipe.kafka_io import FETCH_QUEUE_BACKOFF_MS, TXN_RETRY_BACKOFF_MS, KafkaSettings
from llmpipe.registry import registry_url
from llmpipe.runtime import logging_spec
from llmpipe.settings import (
    Bounded,
    ClientConfig,
    check_kafka_options,
    client_config,
    client_config_option,
    env_option,
    non_empty,
    non_negative_float,
    non_negative_int,
    parse_args,
    port,
    positive_float,
    positive_int,
    topic_name,
)

BackendChoice = Literal["auto", "gpu", "cpu", "reference"]
BadPolicy = Literal["dlq", "fail"]
PartitionBy = Literal["source", "key"]
KafkaReaderKind = Literal["objects", "packed"]
KafkaWriterKind = Literal["objects", "packed"]
MAX_FETCH_BACKOFF_MS = 300_000
"""librdkafka's upper bound for ``fetch.queue.backoff.ms``."""
MAX_RETRY_BACKOFF_MS = 300_000
"""librdkafka's upper bound for ``retry.backoff.ms``."""
bad_ratio = Bounded(float, 0, 1, above=True)
"""0 would stop the stage at its first bad record, which ``--on-bad fail`` says more plainly."""
REFUSED_CONSUMER_KEYS = frozenset({
    "bootstrap.servers", "group.id", "enable.auto.commit", "enable.auto.offset.store", "isolation.level",
})  # fmt: skip
"""Consumer properties ``--consumer-config`` refuses: offsets move only with the transaction, reads are committed."""
REFUSED_PRODUCER_KEYS = frozenset({"bootstrap.servers", "transactional.id", "enable.idempotence", "acks"})
"""Producer properties ``--producer-config`` refuses: the transactions rest on them."""


@dataclass(frozen=True)
class WorkerSettings:
    """Everything ``python -m gpu_stage`` needs; built once in ``main``."""

    kafka: KafkaSettings
    raw_topic: str = "llm.raw"
    typed_base: str = "llm.typed"
    dlq_topic: str = "llm.dlq"
    group_id: str = "gpu-stage"
    transactional_id: str = "gpu-stage-0"
    backend: BackendChoice = "auto"
    content_schema: str | None = None
    batch_records: int = 20_000
    batch_bytes: int = 32 << 20
    batch_wait_ms: int = 200
    parse_chunk_records: int = 10_000
    warm_up_records: int | None = None
    commit_overlap: bool = True
    max_record_bytes: int = 1 << 20
    on_bad: BadPolicy = "dlq"
    max_bad_ratio: float = 0.95
    min_batch_for_ratio: int = 100
    gpu_pool_bytes: int = DEFAULT_POOL_BYTES
    kernel_cache: Path | None = field(default_factory=default_kernel_cache)
    native_threads: int | None = None
    gpu_min_batch: int = 2_000
    lane_order: LaneOrder = "balanced"
    lane_registers: int = LANE_REGISTERS_DEFAULT
    lane_slots: int = LANE_SLOTS_DEFAULT
    device_wait: DeviceWait = "driver"
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    exit_when_idle_s: float | None = None
    progress_every_s: float = 10.0
    txn_deadline_s: float = 120.0
    """``--txn-deadline``: the longest a transaction may go uncompleted while Kafka answers before the
    process exits for a restart (the worker's ``Watchdog``); an outage's time does not count."""
    txn_retry_backoff_ms: int = TXN_RETRY_BACKOFF_MS
    fetch_backoff_ms: int = FETCH_QUEUE_BACKOFF_MS
    partition_by: PartitionBy = "source"
    kafka_reader: KafkaReaderKind = "packed"
    """``--kafka-reader``: ``packed``, raw records read by :class:`llmpipe.kafka_io.PackedReader` into
    packed columns (the native core); ``objects``, through confluent-kafka as a Python object each.
    On the H100 host, 16 GPU workers: ``packed`` 1.16x the rate (``docs/performance.md``)."""
    kafka_writer: KafkaWriterKind = "packed"
    """``--kafka-writer``: ``packed``, typed rows and dead letters produced by
    :class:`llmpipe.kafka_io.PackedWriter`, a parsed chunk's rows per call from the transform's output
    buffer (the native core); ``objects``, through confluent-kafka, a ``produce`` call and a value
    object each. On the H100 host, 16 GPU workers: ``packed`` 1.18x and 1.12x the rate."""
    consumer_config: ClientConfig = field(default=(), repr=False)
    """Further librdkafka consumer properties, over the worker's own (values may be secrets: not in the repr)."""
    producer_config: ClientConfig = field(default=(), repr=False)
    """Further librdkafka producer properties, over the worker's own."""
    schema_registry_url: str | None = field(default=None, repr=False)
    """``--schema-registry-url``: typed values in the Confluent wire format, schema registered there (unset:
    plain Avro). Not in the repr: its user info may hold a password."""

    @property
    def parse_records(self) -> int:
        """Records one parse call sees at most: ``--batch-records``, or a nonzero ``--parse-chunk-records`` if fewer."""
        chunk = self.parse_chunk_records
        return min(self.batch_records, chunk) if chunk else self.batch_records

    @property
    def warm_up_batch(self) -> int:
        """Records in the warm-up batch: as set, or as many as one parse call sees (0: no warm-up)."""
        return self.parse_records if self.warm_up_records is None else self.warm_up_records

    def check_lane_memory(self, content_schema: Mapping[str, Any]) -> None:
        """Refuse batches whose device lane buffers would not fit ``--gpu-pool-bytes`` (gpu backend).

        A parse call's batch holds at most ``--batch-bytes`` and :attr:`parse_records` records; the
        lane keeps ``--lane-slots`` of them (:mod:`gpu_stage.transform.device.memory`).
        """
        from gpu_stage.transform.device.memory import check_lane_fits  # the device lane's package, on demand

        nprops = len(content_schema.get("properties") or {})
        check_lane_fits(self.batch_bytes, self.parse_records, self.lane_slots, nprops, self.gpu_pool_bytes)


def _default(name: str) -> Any:
    """The default of a :class:`WorkerSettings` field: each default is written once, there."""
    return WorkerSettings.__dataclass_fields__[name].default


def parser() -> argparse.ArgumentParser:
    """Options of ``python -m gpu_stage``; each falls back to a ``GPU_STAGE_*`` env var."""
    p = argparse.ArgumentParser(
        prog="python -m gpu_stage",
        description="Parse raw vLLM bodies from Kafka in batches (GPU with cuDF, or CPU) into typed Avro, "
        "exactly once (one Kafka transaction per batch).",
    )
    KafkaSettings.add_options(p, "GPU_STAGE")
    t = p.add_argument_group("topics")
    env_option(
        t, "--raw-topic", "GPU_STAGE_RAW_TOPIC", default=_default("raw_topic"), type=topic_name, help="input topic"
    )
    env_option(
        t,
        "--typed-topic",
        "GPU_STAGE_TYPED_TOPIC",
        default=_default("typed_base"),
        type=topic_name,
        help="typed topic base name; the schema fingerprint is appended (.<8 hex>)",
    )
    env_option(
        t, "--dlq-topic", "GPU_STAGE_DLQ_TOPIC", default=_default("dlq_topic"), type=topic_name,
        help="dead-letter topic",
    )
    env_option(
        t, "--schema-registry-url", "GPU_STAGE_SCHEMA_REGISTRY_URL", type=registry_url,
        help="register the typed schema under <typed topic>-value in this schema registry (Confluent-compatible "
        "API; credentials as https://user:password@host) and write typed values in the Confluent wire format "
        "(magic byte, schema id, Avro datum); unset: plain Avro datums",
    )
    env_option(
        t, "--group-id", "GPU_STAGE_GROUP_ID", default=_default("group_id"), type=non_empty, help="consumer group"
    )
    env_option(
        t,
        "--transactional-id",
        "GPU_STAGE_TRANSACTIONAL_ID",
        default=_default("transactional_id"),
        type=non_empty,
        help="stable per worker instance (fences a restarted instance's zombie); {hostname} is replaced by the "
        "host name, so replicas sharing one setting (compose replicas, StatefulSet pods) get one id each",
    )
    w = p.add_argument_group("parsing")
    env_option(
        w,
        "--backend",
        "GPU_STAGE_BACKEND",
        default=_default("backend"),
        choices=["auto", "gpu", "cpu", "reference"],
        help="gpu fails without a usable GPU; auto picks gpu when present, else cpu (native core), and says so; "
        "reference is the pure-Python implementation of the semantics",
    )
    env_option(w, "--content-schema", "GPU_STAGE_CONTENT_SCHEMA", help="content JSON Schema file (default: bundled)")
    env_option(w, "--batch-records", "GPU_STAGE_BATCH_RECORDS", default=_default("batch_records"), type=positive_int,
               help="max records/batch (>= 1)")
    env_option(w, "--batch-bytes", "GPU_STAGE_BATCH_BYTES", default=_default("batch_bytes"), type=positive_int,
               help="max bytes/batch (>= 1)")
    env_option(
        w,
        "--batch-wait-ms",
        "GPU_STAGE_BATCH_WAIT_MS",
        default=_default("batch_wait_ms"),
        type=positive_int,
        help="close a batch after this long even if small (>= 1: 0 would close every batch empty, at once)",
    )
    env_option(
        w,
        "--parse-chunk-records",
        "GPU_STAGE_PARSE_CHUNK_RECORDS",
        default=_default("parse_chunk_records"),
        type=non_negative_int,
        help="parse a batch in chunks of this many records, each while the previous one's rows are "
        "enqueued (0: the whole batch at once on the main thread, no overlap)",
    )
    env_option(
        w,
        "--warm-up-records",
        "GPU_STAGE_WARM_UP_RECORDS",
        default=_default("warm_up_records"),
        type=non_negative_int,
        help="before joining the group, parse a generated batch of this many records twice, so the first "
        "real batches find the backend's kernels loaded and its buffers allocated (unset: the size of "
        "the batches parse sees, the smaller of --batch-records and a nonzero --parse-chunk-records; 0: none)",
    )
    env_option(
        w,
        "--commit-overlap",
        "GPU_STAGE_COMMIT_OVERLAP",
        default="on" if _default("commit_overlap") else "off",
        choices=["on", "off"],
        help="collect and start parsing the next batch while the previous one commits (off: one batch at a time)",
    )
    env_option(
        w,
        "--max-record-bytes",
        "GPU_STAGE_MAX_RECORD_BYTES",
        default=_default("max_record_bytes"),
        type=positive_int,
        help="larger bodies go to the DLQ as too_large",
    )
    env_option(
        w,
        "--on-bad",
        "GPU_STAGE_ON_BAD",
        default=_default("on_bad"),
        choices=["dlq", "fail"],
        help="bad records: dead-letter them, or stop the stage",
    )
    env_option(
        w,
        "--max-bad-ratio",
        "GPU_STAGE_MAX_BAD_RATIO",
        default=_default("max_bad_ratio"),
        type=bad_ratio,
        help="stop loudly when a batch is mostly bad (misconfiguration, not bad data); in (0, 1]",
    )
    env_option(
        w,
        "--gpu-pool-bytes",
        "GPU_STAGE_GPU_POOL_BYTES",
        default=_default("gpu_pool_bytes"),
        type=positive_int,
        help="cap of the GPU memory pool (vLLM shares the card)",
    )
    env_option(
        w,
        "--native-threads",
        "GPU_STAGE_NATIVE_THREADS",
        type=positive_int,
        help="threads of the native core for the rows the device lane leaves (gpu backend); unset: every "
        "core this process may use. With several GPU workers on one host, give each its share",
    )
    env_option(
        w,
        "--gpu-min-batch",
        "GPU_STAGE_GPU_MIN_BATCH",
        default=_default("gpu_min_batch"),
        type=non_negative_int,
        help="gpu backend: parse batches (or parse chunks) of fewer records on the native core instead, "
        "whose cost for a few hundred bodies is below a device pass's fixed cost (latency-bound, "
        "lightly loaded workers); 0: every batch on the device",
    )
    env_option(
        w,
        "--lane-order",
        "GPU_STAGE_LANE_ORDER",
        default=_default("lane_order"),
        choices=list(LANE_ORDERS),
        help="gpu backend: which body each thread of the device lane takes. arrival: as they come; length: "
        "bodies of like length side by side, so that the 32 threads of a warp end together (slower on real "
        "bodies, whose threads seldom step together); balanced: those bodies dealt round the warps, so that "
        "every warp holds about the same bytes; warp: in pass 1 a warp per body, its 32 threads reading the "
        "body's strings 32 bytes at a step. The output is the same",
    )
    env_option(
        w,
        "--lane-registers",
        "GPU_STAGE_LANE_REGISTERS",
        default=_default("lane_registers"),
        type=Bounded(int, *LANE_REGISTERS, or_zero=True),
        help="gpu backend: registers per thread that the device lane's pass 1 may take, so that more of its "
        "warps stay resident (values spill to local memory); 0: the compiler's choice. Whether another value "
        "pays depends on the host and the traffic: measure it (docs/operating.md, Register cap). Each value is "
        "compiled once into the kernel cache. The output is the same",
    )
    env_option(
        w,
        "--lane-slots",
        "GPU_STAGE_LANE_SLOTS",
        default=_default("lane_slots"),
        type=Bounded(int, *LANE_SLOTS),
        help="gpu backend: batches the device lane keeps on the device at once, each with buffers of its own "
        "(about five times the batch's bytes). 2: one batch's pass 2 beside the next one's pass 1; 3 or 4: "
        "further batches copied in and parsed ahead, so that the device has work while the host hands a "
        "batch on. The output is the same",
    )
    env_option(
        w,
        "--device-wait",
        "GPU_STAGE_DEVICE_WAIT",
        default=_default("device_wait"),
        choices=list(DEVICE_WAITS),
        help="gpu backend: how the feeding thread waits for the device. driver: the CUDA driver's wait, which "
        "spins on a core while the host has more cores than CUDA contexts; poll: ask the device every 0.2 ms "
        "and sleep in between, leaving the core to the worker's other threads and to other workers; block: "
        "sleep until the driver wakes the thread at the batch's end (blocking-sync events)",
    )
    env_option(
        w,
        "--kernel-cache",
        "GPU_STAGE_KERNEL_CACHE",
        help="folder for the GPU kernels compiled at start, reused by later starts; unset: "
        "$XDG_CACHE_HOME/llmpipe/kernels (~/.cache/…); '' compiles them at every start",
    )
    o = p.add_argument_group("operation")
    env_option(o, "--metrics-port", "GPU_STAGE_METRICS_PORT", type=port,
               help="serve Prometheus metrics here (1-65535; unset: none)")
    env_option(
        o, "--metrics-host", "GPU_STAGE_METRICS_HOST", default=_default("metrics_host"), type=non_empty,
        help="address the metrics server binds (0.0.0.0 in containers)",
    )
    env_option(
        o,
        "--exit-when-idle",
        "GPU_STAGE_EXIT_WHEN_IDLE_S",
        type=non_negative_float,
        help="exit 0 after this many seconds without input (backfills, tests); unset: never",
    )
    env_option(
        o,
        "--txn-deadline",
        "GPU_STAGE_TXN_DEADLINE_S",
        default=_default("txn_deadline_s"),
        type=positive_float,
        help="exit 75 (for a supervised restart, which fences the stuck transaction) when no transaction has "
        "completed for this many seconds (> 0) while Kafka answered; time while Kafka does not answer does not "
        "count, so an outage is ridden out (retried until Kafka is back) instead of exited on",
    )
    env_option(
        o,
        "--txn-retry-backoff-ms",
        "GPU_STAGE_TXN_RETRY_BACKOFF_MS",
        default=_default("txn_retry_backoff_ms"),
        type=Bounded(int, 1, MAX_RETRY_BACKOFF_MS),
        help="the producer's retry backoff; a transaction begun right after a commit waits for it "
        "(librdkafka's default is 100)",
    )
    env_option(
        o,
        "--fetch-backoff-ms",
        "GPU_STAGE_FETCH_BACKOFF_MS",
        default=_default("fetch_backoff_ms"),
        type=Bounded(int, 0, MAX_FETCH_BACKOFF_MS),
        help="how long the consumer stops fetching once its prefetch queue is full (fetch.queue.backoff.ms; "
        "librdkafka's default of 1000 left a worker reading a backlog waiting in most of each second)",
    )
    env_option(
        o,
        "--partition-by",
        "GPU_STAGE_PARTITION_BY",
        default=_default("partition_by"),
        choices=["source", "key"],
        help="source: a typed or dead-letter record goes to its raw record's partition number wherever that "
        "topic has as many partitions as the raw topic (each transaction then touches only this worker's "
        "partitions: fewer transaction markers, and no waiting on other workers' open transactions), else by "
        "key; key: always by key",
    )
    env_option(
        o,
        "--kafka-reader",
        "GPU_STAGE_KAFKA_READER",
        default=_default("kafka_reader"),
        choices=["objects", "packed"],
        help="objects: read raw records through confluent-kafka, a Python object each; packed: read them "
        "with the native core into packed columns, with no object per record (less CPU per record)",
    )
    env_option(
        o,
        "--kafka-writer",
        "GPU_STAGE_KAFKA_WRITER",
        default=_default("kafka_writer"),
        choices=["objects", "packed"],
        help="objects: produce typed rows and dead letters through confluent-kafka, a call and a value object "
        "per row; packed: with the native core, a parsed chunk's rows per call straight from the output "
        "buffer (less CPU per record); transactions and their guarantees are the same",
    )
    client_config_option(
        o, "--consumer-config", "GPU_STAGE_CONSUMER_CONFIG",
        help="a librdkafka consumer property over the worker's own (e.g. max.partition.fetch.bytes=8388608); "
        "refused: " + ", ".join(sorted(REFUSED_CONSUMER_KEYS)),
    )  # fmt: skip
    client_config_option(
        o, "--producer-config", "GPU_STAGE_PRODUCER_CONFIG",
        help="a librdkafka producer property over the worker's own (e.g. linger.ms=20); "
        "refused: " + ", ".join(sorted(REFUSED_PRODUCER_KEYS)),
    )  # fmt: skip
    p.add_argument("--print-schema", action="store_true", help="print the Avro schema, the DDL and exit")
    p.add_argument(
        "--log-level",
        default="INFO",
        type=logging_spec,
        help="logging level, then any logger=LEVEL (INFO,gpu_stage.worker=DEBUG: one line per batch with its steps)",
    )
    return p


HOSTNAME_PLACEHOLDER = "{hostname}"


def expand_transactional_id(template: str, hostname: str | None = None) -> str:
    """``template`` with ``{hostname}`` replaced by ``hostname`` (default: this host's name).

    Each replica started from one configuration then has its own id, and a restarted replica (same host
    name: a restarted container, a StatefulSet pod) gets its old id back, so it fences its own zombie.
    """
    if HOSTNAME_PLACEHOLDER not in template:
        return template
    return template.replace(HOSTNAME_PLACEHOLDER, hostname if hostname is not None else socket.gethostname())


def from_args(args: argparse.Namespace) -> WorkerSettings:
    """Build and check the settings (each value's range was checked as it was parsed).

    The content schema is loaded here, before any backend is built or Kafka is asked, so a bad one
    fails at once; ``main`` loads it again from the loader's cache. With ``--backend gpu`` the device
    lane's buffers are checked against the GPU memory pool here too.
    """
    check_kafka_options(args)
    schema = load_content_schema(args.content_schema, "--content-schema")
    settings = WorkerSettings(
        kafka=KafkaSettings.from_args(args),
        raw_topic=args.raw_topic,
        typed_base=args.typed_topic,
        dlq_topic=args.dlq_topic,
        group_id=args.group_id,
        transactional_id=expand_transactional_id(args.transactional_id),
        backend=args.backend,
        content_schema=args.content_schema,
        batch_records=args.batch_records,
        batch_bytes=args.batch_bytes,
        batch_wait_ms=args.batch_wait_ms,
        parse_chunk_records=args.parse_chunk_records,
        warm_up_records=args.warm_up_records,
        commit_overlap=args.commit_overlap == "on",
        max_record_bytes=args.max_record_bytes,
        on_bad=args.on_bad,
        max_bad_ratio=args.max_bad_ratio,
        gpu_pool_bytes=args.gpu_pool_bytes,
        kernel_cache=_kernel_cache(args.kernel_cache),
        native_threads=args.native_threads,
        gpu_min_batch=args.gpu_min_batch,
        lane_order=args.lane_order,
        lane_registers=args.lane_registers,
        lane_slots=args.lane_slots,
        device_wait=args.device_wait,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        exit_when_idle_s=args.exit_when_idle,
        txn_deadline_s=args.txn_deadline,
        txn_retry_backoff_ms=args.txn_retry_backoff_ms,
        fetch_backoff_ms=args.fetch_backoff_ms,
        partition_by=args.partition_by,
        kafka_reader=args.kafka_reader,
        kafka_writer=args.kafka_writer,
        consumer_config=client_config(args.consumer_config, "--consumer-config", REFUSED_CONSUMER_KEYS),
        producer_config=client_config(args.producer_config, "--producer-config", REFUSED_PRODUCER_KEYS),
        schema_registry_url=args.schema_registry_url,
    )
    if settings.backend == "gpu":  # "auto" is checked once it has chosen the GPU (see main)
        settings.check_lane_memory(schema)
    return settings


def _kernel_cache(option: str | None) -> Path | None:
    """The kernel cache folder from ``--kernel-cache``: the user's cache when unset, none when empty.

    A path that exists but is not a folder is refused now: the device lane would fail on it only when
    it first compiles its kernels.
    """
    if option is None:
        return default_kernel_cache()
    if option and Path(option).exists() and not Path(option).is_dir():
        msg = f"--kernel-cache {option}: is a file, not a folder"
        raise ConfigError(msg)
    return Path(option) if option else None


def parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, WorkerSettings]:
    """Parse ``argv`` into the namespace (for flags like ``--print-schema``) and the settings."""
    args = parse_args(parser(), argv)
    return args, from_args(args)
