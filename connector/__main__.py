"""``python -m connector``: prompts (Kafka topic or JSONL) → vLLM → ``llm.raw`` / ``llm.dlq``, exactly once.

SIGTERM/SIGINT: stop reading, let calls in flight finish (up to ``--drain-timeout-s``), commit, exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence

from connector import records
from connector import settings as config
from connector.engine import Engine, EngineOptions, Stats
from connector.http import Caller, make_client
from connector.metrics import ConnectorMetrics
from connector.requests import BodyOptions, response_format
from connector.sources import FileSource, KafkaSource, Partition, Source
from llmpipe import aio, kafka_io, runtime
from llmpipe.errors import ConfigError, PipelineError
from llmpipe.listen import serve_metrics
from llmpipe.runtime import configure_logging

log = logging.getLogger("connector")


def _source_factory(s: config.ConnectorSettings) -> Callable[[Callable[[list[Partition]], None]], Source]:
    def make(on_revoke: Callable[[list[Partition]], None]) -> Source:
        if s.input_topic:
            return KafkaSource(s.kafka, s.input_topic, s.group_id, s.transactional_id, on_revoke, s.state_topic)
        assert s.input_file is not None
        return FileSource(s.kafka, s.input_file, s.state_topic, s.source_id)

    return make


# Kafka's default topic limit (``max.message.bytes``); topics the connector creates get more only
# when --max-record-bytes needs it, never less (the DLQ topic is shared with gpu_stage).
_TOPIC_DEFAULT_MAX_BYTES = 1_048_588


def _producer_factory(s: config.ConnectorSettings) -> Callable[[], kafka_io.TransactionalProducer]:
    def make() -> kafka_io.TransactionalProducer:
        # The engine sizes every record against max_record_bytes first, so the producer never refuses one.
        return kafka_io.TransactionalProducer(
            s.kafka,
            s.transactional_id,
            {
                "linger.ms": 20,
                "queue.buffering.max.messages": 200000,
                "message.max.bytes": s.max_record_bytes + records.RECORD_OVERHEAD,
            },
        )

    return make


def engine_options(s: config.ConnectorSettings) -> EngineOptions:
    """Engine knobs from the settings (also used by the benchmark)."""
    fmt = response_format(s.content_schema, s.schema_name) if s.content_schema is not None else None
    body = BodyOptions(s.model, fmt, s.http.stream, s.max_request_bytes)
    return EngineOptions(
        raw_topic=s.raw_topic,
        dlq_topic=s.dlq_topic,
        endpoint=s.http.url,
        body=body,
        max_in_flight=s.max_in_flight,
        max_pending=s.max_pending,
        commit_interval_s=s.commit_interval_s,
        max_txn_records=s.max_txn_records,
        drain_timeout_s=s.drain_timeout_s,
        max_record_bytes=s.max_record_bytes,
    )


def check_kafka(s: config.ConnectorSettings) -> None:
    """Before any work: the cluster answers (bounded wait), the credentials are accepted, the input topic exists."""
    kafka_io.await_cluster(s.kafka)
    if s.input_topic:
        kafka_io.require_topic(s.kafka, s.input_topic, "--input-topic")


async def run(s: config.ConnectorSettings, metrics: ConnectorMetrics) -> Stats:
    """Run one engine until end of input or a termination signal."""
    topic_bytes = s.max_record_bytes + records.RECORD_OVERHEAD
    topic_config = {"max.message.bytes": str(topic_bytes)} if topic_bytes > _TOPIC_DEFAULT_MAX_BYTES else None
    kafka_io.create_topics(s.kafka, {s.raw_topic: 1, s.dlq_topic: 1}, topic_config)
    watch = kafka_io.ClusterWatch(s.kafka, s.raw_topic).start()
    async with make_client(s.http) as client:
        engine = Engine(
            engine_options(s),
            _source_factory(s),
            Caller(client, s.http, s.retry, metrics),
            _producer_factory(s),
            metrics,
            watch,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, engine.stop)
        try:
            return await engine.run()
        finally:
            watch.stop()


GEN0_THRESHOLD = 20_000
"""Each call allocates a few hundred short-lived objects (request, response, headers, futures), so with
CPython's default threshold the collector ran every few calls and rescanned the survivors each time. In
alternating runs on the 2-core machine zero-latency runs were 6-9 % faster (3 of 3 pairs) with this
threshold and start-up frozen; 200 ms runs, bound by latency, gained 0-1 %."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the exit code says how the run ended.

    0 a clean stop; 2 bad settings (a refused login, a missing input topic); 3 a pipeline failure
    (Kafka unreachable at start, fenced); 4 every request failed.
    """
    metrics = ConnectorMetrics()
    try:
        s = config.load(argv)
        if s.metrics_port is not None:
            serve_metrics(s.metrics_port, s.metrics_host, metrics.registry)
    except ConfigError as exc:
        print(f"connector: {exc}", file=sys.stderr)
        return 2
    configure_logging(s.log_level)
    # httpx writes one INFO line per request: at thousands of requests/s that formatting and writing
    # cost about a tenth of the process's CPU. Outcomes are counted in the metrics instead.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    log.info(
        "connector starting: url=%s input=%s transport=%s loop=%s",
        s.http.url,
        s.input_topic or s.input_file,
        s.http.transport,
        aio.loop_name(),
    )
    runtime.tune_gc(GEN0_THRESHOLD)
    try:
        check_kafka(s)
        stats = aio.run(run(s, metrics))
    except ConfigError as exc:
        log.error("connector: %s", exc)
        return 2
    except PipelineError as exc:
        log.error("connector stopped: %s", exc)
        return 3
    elapsed = time.monotonic() - stats.started
    # startup_s: engine start (Kafka producer, input position) to the first HTTP call; work_s: first
    # call to last commit, the span the completions/s of a run are measured over.
    first, last = stats.first_call, stats.last_commit
    log.info(
        "connector done: committed=%d dlq=%d elapsed_s=%.2f rate=%.0f/s startup_s=%.2f work_s=%.2f work_rate=%.0f/s "
        "txns=%d longest_txn_ms=%.0f",
        stats.committed,
        stats.dead_letters,
        elapsed,
        stats.committed / max(elapsed, 1e-9),
        (first - stats.started) if first is not None else float("nan"),
        (last - first) if first is not None and last is not None else float("nan"),
        stats.work_rate(),
        stats.transactions,
        stats.longest_transaction_s * 1000,
    )
    return _verdict(stats, s.http.url)


EXIT_ALL_FAILED = 4
"""Exit code of a run that read requests and wrote no response at all (every one a dead letter)."""


def _verdict(stats: Stats, url: str) -> int:
    """0, or ``EXIT_ALL_FAILED`` with one line when no request of the run got a response.

    Each failure is a dead letter with its reason, but a run whose every request failed almost
    always means a wrong ``--url`` or a vLLM that is down: a scheduler must see it as a failure.
    """
    answered = stats.committed - stats.dead_letters
    if stats.committed and not answered:
        log.error("every request of the run failed (%d dead letters, none answered): check --url %s "
                  "and the dead letters' reasons", stats.dead_letters, url)  # fmt: skip
        return EXIT_ALL_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
