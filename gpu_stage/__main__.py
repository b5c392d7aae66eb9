"""``python -m gpu_stage``: the raw → typed worker (see ``--help``)."""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from gpu_stage import metrics
from gpu_stage.runtime import tune_process, warm_up
from gpu_stage.settings import WorkerSettings, parse
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.backends import choose, gpu_unusable_reason
from gpu_stage.worker import MAX_MESSAGE_BYTES, Worker
from jobs.typed_table import ReadRange, TopicSource, typed_table_ddl, without_secrets
from llmpipe.errors import ConfigError, FencedError, PipelineError
from llmpipe.kafka_io import ClusterWatch, await_cluster, create_topics, require_topic
from llmpipe.listen import serve_metrics
from llmpipe.record import TypedRecord
from llmpipe.runtime import configure_logging

log = logging.getLogger("gpu_stage")


def print_schema(record: TypedRecord, typed_topic: str, settings: WorkerSettings) -> None:
    """Print the typed topic, the Avro schema and the Flink table over it (one source of truth).

    The table is the one the feature jobs create (``jobs.typed_table``): the columns, the watermark on
    ``created`` and the ``WITH`` clause for this worker's cluster and format, passwords replaced by
    placeholders. ``python -m jobs.sql_init`` writes it with the DLQ and features tables as an init file.
    """
    source = TopicSource(settings.kafka, typed_topic, ReadRange(start="earliest"),
                         schema_registry_url=settings.schema_registry_url)
    print(f"-- typed topic: {typed_topic}  (schema fingerprint {record.fingerprint})")
    print(json.dumps(record.avro, indent=2))
    print(typed_table_ddl("typed", record, without_secrets(source)) + ";")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the worker; exit 0 on SIGTERM/idle exit, 1 on errors, 2 on bad settings (one line) or when fenced."""
    try:
        args, settings = parse(argv)
        configure_logging(args.log_level)
        record = TypedRecord.from_file(settings.content_schema)
        typed_topic = record.versioned_topic(settings.typed_base)
        if args.print_schema:
            print_schema(record, typed_topic, settings)
            return 0
        if settings.metrics_port:  # before any waiting or start-up work, so a taken port fails at once
            serve_metrics(settings.metrics_port, settings.metrics_host)
        # Before the backend's start-up work: an unreachable cluster, refused credentials or a
        # missing input topic end the start in one line, not after a GPU warm-up.
        await_cluster(settings.kafka)
        partitions = require_topic(settings.kafka, settings.raw_topic, "--raw-topic")
        transform = TransformSettings(
            record=record,
            max_record_bytes=settings.max_record_bytes,
            kernel_cache=settings.kernel_cache,
            native_threads=settings.native_threads,
            gpu_min_batch=settings.gpu_min_batch,
            lane_order=settings.lane_order,
            lane_registers=settings.lane_registers,
            lane_slots=settings.lane_slots,
            device_wait=settings.device_wait,
        )
        if settings.backend == "auto" and gpu_unusable_reason() is None:  # it will choose the GPU
            settings.check_lane_memory(record.content_schema)
        backend = choose(settings.backend, transform, settings.gpu_pool_bytes)
        if backend.name == "gpu" and settings.gpu_min_batch:
            log.info("batches (parse chunks) under %d records parse on the native core (--gpu-min-batch)",
                     settings.gpu_min_batch)
        tune_process()
        warm_up(backend, settings.warm_up_batch)
        metrics.BACKEND.labels(backend.name).set(1)
        create_topics(
            settings.kafka,
            # Both as many as raw, so each output record can go to its raw record's partition.
            {typed_topic: partitions, settings.dlq_topic: partitions},
            {"max.message.bytes": str(MAX_MESSAGE_BYTES)},
        )
        log.info("consuming %s → %s (+ %s), group %s; Kafka reader %s, writer %s", settings.raw_topic, typed_topic,
                 settings.dlq_topic, settings.group_id, settings.kafka_reader, settings.kafka_writer)  # fmt: skip
        watch = ClusterWatch(settings.kafka, settings.raw_topic).start()
        worker = Worker(settings, backend, typed_topic, record.fingerprint, watch)
        _stop_on_sigterm(worker)
        return worker.run()
    except FencedError as exc:
        log.error("fenced by a newer instance with the same transactional id: %s", exc)
        return 2
    except ConfigError as exc:
        print(f"gpu_stage: {exc}", file=sys.stderr)
        return 2
    except PipelineError as exc:
        log.error("%s", exc)
        return 1


def _stop_on_sigterm(worker: Worker) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        del frame
        log.info("signal %d: finishing the current batch, then exiting", signum)
        worker.stopping = True

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


if __name__ == "__main__":
    sys.exit(main())
