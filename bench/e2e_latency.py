"""``python -m bench.e2e_latency``: per-record latency through the broker at a fixed offered load.

Paced producer processes offer R records/s of raw records (record ``i`` is due at ``t0 + i / R``;
bodies cycled from a pool of ``--pool`` distinct ones of ``--corpus``, by default the real-shaped
corpus of :mod:`bench.real_corpus`, or read by ``--corpus-in``); K ``python -m gpu_stage``
workers process them with transactions; a ``read_committed`` watcher consumes the typed and DLQ
topics and takes, for every key, the time from its due time to the moment the watcher received it.
Latency is measured from the schedule, not from the actual send, so a producer that falls behind
counts against it (no coordinated omission). The keys are then checked exactly once. Not a test:
the figures depend on the host and its neighbours.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import platform
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
import numpy as np
import numpy.typing as npt

from bench import corpora, gc_log
from bench.e2e_summary import cpu_figures, summaries
from bench.e2e_worker import (
    BACKOFF_PAIR,
    HEADERS,
    PARTITION_BY_PAIR,
    RESULTS,
    add_run_options,
    check_keys,
    common_result,
    finish_workers,
    fresh_topics,
    paired_overlap_runs,
    paired_runs,
    start_workers,
    stop_workers,
    wait_group,
)
from bench.machine import CpuWindow
from llmpipe.kafka_io import KafkaSettings, Producer, delete_topics
from llmpipe.runtime import configure_logging

log = logging.getLogger("bench.e2e_latency")

# consume() returns when it has its count or when this wait is over, whichever comes first, and the
# receive time of a whole call is taken after it returns: a longer wait would count against latency.
WATCH_WAIT_S = 0.002


def pace(
    kafka: KafkaSettings, topic: str, first: int, step: int, records: int, rate: float, t0: float, bodies: list[bytes]
) -> float:
    """Produce keys ``first, first + step, …`` each at its due time, ``bodies`` cycled; the worst lag (s)."""
    producer = Producer(kafka, {"linger.ms": 2, "batch.size": 1 << 20})
    worst = 0.0
    for i in range(first, records, step):
        due = t0 + i / rate
        ahead = due - time.time()
        if ahead > 0.001:
            time.sleep(ahead)
        else:
            worst = max(worst, -ahead)
        producer.produce(topic, bodies[i % len(bodies)], f"req-{i:09d}".encode(), HEADERS)
        producer.poll(0)
    producer.flush(120)
    return worst


def watch(
    bootstrap: str, topics: list[str], records: int, rate: float, t0: float, deadline: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Each record the read_committed watcher receives before ``deadline``: latency and its first part (ms), due time.

    The first part ends at the output record's create time (set by the worker's producer); the rest is
    the worker's transaction commit and the record becoming visible to the watcher. The due time is
    in seconds from ``t0``.
    """
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-watch-{uuid.uuid4().hex[:6]}",
        "isolation.level": "read_committed", "enable.auto.commit": False, "fetch.wait.max.ms": 5,
    })  # fmt: skip
    parts = [confluent_kafka.TopicPartition(t, p, confluent_kafka.OFFSET_BEGINNING)
             for t in topics for p in consumer.list_topics(t, timeout=10).topics[t].partitions]
    consumer.assign(parts)
    latencies = np.empty(records, dtype=np.float64)
    to_produce = np.empty(records, dtype=np.float64)
    due_s = np.empty(records, dtype=np.float64)
    seen = 0
    try:
        while seen < records and time.time() < deadline:
            batch = consumer.consume(10_000, WATCH_WAIT_S)
            now = time.time()
            for msg in batch:
                key = msg.key()
                if msg.error() is None and key is not None and seen < records:
                    due_s[seen] = int(key[4:]) / rate
                    due = t0 + due_s[seen]
                    latencies[seen] = (now - due) * 1000
                    to_produce[seen] = msg.timestamp()[1] - due * 1000
                    seen += 1
    finally:
        consumer.close()
    return latencies[:seen], to_produce[:seen], due_s[:seen]


def percentiles(ms: npt.NDArray[np.float64]) -> dict[str, float]:
    """P50 … P99.9 and the maximum, rounded to 0.1 ms (empty when nothing was received)."""
    if not len(ms):
        return {}
    return {**{f"p{q}": round(float(np.percentile(ms, q)), 1) for q in (50, 90, 99, 99.9)},
            "max": round(float(ms.max()), 1)}  # fmt: skip


def by_second(ms: npt.NDArray[np.float64], due_s: npt.NDArray[np.float64]) -> list[dict[str, float]]:
    """P50, P99 and the maximum of the records due in each second of the run: where the tail comes from."""
    seconds = due_s.astype(np.int64)
    return [{"second": int(k), "records": int((seconds == k).sum()), **_short(percentiles(ms[seconds == k]))}
            for k in np.unique(seconds)]  # fmt: skip


def by_tenth(ms: npt.NDArray[np.float64], due_s: npt.NDArray[np.float64], until_s: float) -> list[dict[str, float]]:
    """The same per 100 ms for the records due before ``until_s``: how long the start's tail lasts."""
    early = due_s < until_s
    tenths = np.floor(due_s[early] * 10).astype(np.int64)
    return [{"from_s": round(int(k) / 10, 1), "records": int((tenths == k).sum()),
             **_short(percentiles(ms[early][tenths == k]))} for k in np.unique(tenths)]  # fmt: skip


def _short(p: dict[str, float]) -> dict[str, float]:
    return {q: p[q] for q in ("p50", "p99", "max")}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start workers, offer the load, watch, check; the result dictionary."""
    kafka = KafkaSettings(bootstrap=args.bootstrap, compression=args.compression)
    pool = corpora.load(args, min(args.records, args.pool))
    topics = fresh_topics(kafka, args, with_raw=True)
    try:
        group, procs = start_workers(args, topics.raw, topics.typed_base, topics.dlq, topics.logs)
        try:
            joined_s = wait_group(kafka, group, args.workers, procs, args.join_timeout_s)
        except SystemExit:
            stop_workers(procs)
            raise
        log.info("%d workers in group %s after %.1fs: offering the load", args.workers, group, joined_s)
        t0 = time.time() + args.warmup_s
        cpu = CpuWindow(args.broker_pid or None)
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(args.producers) as producers:
            lags = producers.starmap_async(pace, [(kafka, topics.raw, p, args.producers, args.records,
                                                   args.rate, t0, pool.values) for p in range(args.producers)])
            deadline = t0 + args.records / args.rate + args.drain_s
            threading.Timer(max(0.0, t0 - time.time()), cpu.start).start()  # the window opens with the load
            latencies, to_produce, due_s = watch(
                args.bootstrap, [topics.typed, topics.dlq], args.records, args.rate, t0, deadline
            )
            cpu.stop()
            watched_until = time.time()
            worst_lag = max(lags.get(timeout=120))
        codes = finish_workers(kafka, group, topics.raw, procs, args.drain_s, records=args.records, end_marker=False)
        per_worker = summaries(topics.logs, args.workers)
        check = check_keys(kafka, topics.typed, topics.dlq, args.records)
    finally:
        if not args.keep_topics:
            delete_topics(kafka, topics.all())
    return {
        **common_result(args, codes, per_worker, check), "corpus": pool.facts(), "offered_per_s": args.rate,
        "producers": args.producers, "join_seconds": round(joined_s, 2),
        "producer_worst_lag_ms": round(worst_lag * 1000, 1), "received": len(latencies),
        "latency_ms": percentiles(latencies), "due_to_produced_ms": percentiles(to_produce),
        "produced_to_visible_ms": percentiles(latencies - to_produce),
        "settle_s": args.settle_s,
        "latency_ms_after_settle": percentiles(latencies[due_s >= args.settle_s]),
        "latency_ms_by_second": by_second(latencies, due_s),
        "latency_ms_by_tenth_until_settle": by_tenth(latencies, due_s, args.settle_s),
        # which part the first seconds' tail is in: up to the worker's produce, or its commit and the read
        "due_to_produced_ms_by_second": by_second(to_produce, due_s),
        "produced_to_visible_ms_by_second": by_second(latencies - to_produce, due_s),
        **cpu_figures(cpu, per_worker, args.records),
        **gc_log.figures(args.broker_gc_log, t0, watched_until),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run once, print the percentiles, write the JSON result."""
    configure_logging("INFO")
    p = argparse.ArgumentParser(prog="python -m bench.e2e_latency", description=__doc__)
    add_run_options(p, records=100_000, batch_records=2_000, batch_wait_ms=20)
    p.add_argument("--rate", type=float, default=10_000, help="offered records/s")
    p.add_argument("--producers", type=int, default=1, help="paced producer processes sharing the rate")
    p.add_argument("--warmup-s", type=float, default=1.0,
                   help="pause between the group being complete and the first send")
    p.add_argument("--settle-s", type=float, default=2.0,
                   help="also report the percentiles of the records due this many seconds or more after the first")
    p.add_argument("--drain-s", type=float, default=30.0, help="how long the watcher waits after the last send")
    p.add_argument("--pool", type=int, default=10_000, help="distinct bodies made or read (then cycled)")
    corpora.add_options(p)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--compare-commit-overlap", type=int, default=0, metavar="ROUNDS",
                   help="instead of one run: ROUNDS pairs of runs, --commit-overlap off (the baseline) then on, "
                   "on fresh topics, with the percentiles of each pair")
    p.add_argument("--compare-txn-backoff", type=int, default=0, metavar="ROUNDS",
                   help="instead of one run: ROUNDS pairs of runs, the workers' --txn-retry-backoff-ms at "
                   "librdkafka's default 100 (the baseline) then at the worker's default, with the percentiles "
                   "of each pair")
    p.add_argument("--compare-partition-by", type=int, default=0, metavar="ROUNDS",
                   help="instead of one run: ROUNDS pairs of runs, the workers' --partition-by key (the baseline) "
                   "then source, with the percentiles of each pair")
    p.add_argument("--compare-warm-up", type=int, default=0, metavar="ROUNDS",
                   help="instead of one run: ROUNDS pairs of runs, the workers' --warm-up-records 0 (no warm-up, "
                   "the baseline) then at the worker's default, with the percentiles of each pair")
    args = p.parse_args(argv)
    corpora.check(p, args)
    if args.compare_partition_by:
        out = args.out or RESULTS / f"latency-partition-by-{platform.node() or 'host'}-{args.backend}.json"
        return paired_runs(args, run_and_print, _partition_pair, out, "partition_by", PARTITION_BY_PAIR,
                           args.compare_partition_by)  # fmt: skip
    if args.compare_warm_up:
        out = args.out or RESULTS / f"latency-warm-up-{platform.node() or 'host'}-{args.backend}.json"
        return paired_runs(args, run_and_print, _warm_up_pair, out, "warm_up_records", WARM_UP_PAIR,
                           args.compare_warm_up)  # fmt: skip
    if args.compare_txn_backoff:
        out = args.out or RESULTS / f"latency-txn-backoff-{platform.node() or 'host'}-{args.backend}.json"
        return paired_runs(args, run_and_print, _backoff_pair, out, "txn_retry_backoff_ms", BACKOFF_PAIR,
                           args.compare_txn_backoff)  # fmt: skip
    if args.compare_commit_overlap:
        out = args.out or RESULTS / f"latency-commit-overlap-{platform.node() or 'host'}-{args.backend}.json"
        return paired_overlap_runs(args, run_and_print, _latency_pair, out)
    result = run_and_print(args)
    out = args.out or RESULTS / f"latency-{result['host'] or 'host'}-{args.backend}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out}")
    return 0 if result["exactly_once"] and not any(result["exit_codes"]) else 1


def run_and_print(args: argparse.Namespace) -> dict[str, Any]:
    """One run, its percentiles printed."""
    result = run(args)
    body = result["corpus"].get("config", {}).get("corpus", "read")
    print(f"{args.records:,} records ({body} corpus) offered at {args.rate:,.0f}/s to {args.workers} x gpu_stage "
          f"--backend {args.backend} --commit-overlap {args.commit_overlap} (batches of {args.batch_records}, "
          f"{args.batch_wait_ms} ms): latency ms {result['latency_ms']} "
          f"(records due from {args.settle_s:g} s on: {result['latency_ms_after_settle']}); "
          f"(due -> produced by the worker {result['due_to_produced_ms']}, then -> visible "
          f"{result['produced_to_visible_ms']}); received {result['received']:,}; "
          f"producer worst lag {result['producer_worst_lag_ms']} ms; "
          f"exactly once: {result['exactly_once']}")
    parts = ("latency_ms_by_second", "due_to_produced_ms_by_second", "produced_to_visible_ms_by_second")
    seconds = zip(*(result[part] for part in parts), strict=True)
    print("P99 ms by second, whole / due -> produced / produced -> visible: "
          + ", ".join(f"{w['second']}: {w['p99']}/{d['p99']}/{v['p99']}" for w, d, v in seconds))  # fmt: skip
    print("P99 ms by 100 ms until the settle: "
          + ", ".join(f"{t['from_s']}: {t['p99']}" for t in result["latency_ms_by_tenth_until_settle"]))
    if "broker_gc" in result:
        print(f"broker GC pauses over the load: {result['broker_gc']}")
    return result


def _to_baseline(base: dict[str, Any], new: dict[str, Any]) -> dict[str, float]:
    """P50 and P99 of ``new`` over ``base``'s, for the whole run and from ``--settle-s`` on: below 1 is lower."""
    ratios = {f"{q}_to_baseline": round(new["latency_ms"][q] / base["latency_ms"][q], 3) for q in ("p50", "p99")}
    settled = (new["latency_ms_after_settle"], base["latency_ms_after_settle"])
    ratios |= {f"{q}_after_settle_to_baseline": round(settled[0][q] / settled[1][q], 3) for q in ("p50", "p99")}
    return ratios


def _backoff_pair(base: dict[str, Any], new: dict[str, Any]) -> dict[str, float]:
    """:func:`_to_baseline` of the short backoff over librdkafka's."""
    ratios = _to_baseline(base, new)
    print(f"txn retry backoff {new['txn_retry_backoff_ms']} ms / {base['txn_retry_backoff_ms']} ms, latency: {ratios}")
    return ratios


def _partition_pair(base: dict[str, Any], new: dict[str, Any]) -> dict[str, float]:
    """:func:`_to_baseline` of records written to their raw record's partition over records written by key."""
    ratios = _to_baseline(base, new)
    print(f"partition by source / by key, latency: {ratios}")
    return ratios


WARM_UP_PAIR = (0, -1)
"""The workers' --warm-up-records in a warm-up pair: none (the baseline), then the worker's default."""


def _warm_up_pair(cold: dict[str, Any], warm: dict[str, Any]) -> dict[str, float]:
    """:func:`_to_baseline` of warmed-up workers over cold ones, and the same for the first second's P99."""
    first = (warm["latency_ms_by_second"][0], cold["latency_ms_by_second"][0])
    ratios = _to_baseline(cold, warm)
    ratios["first_second_p99_to_baseline"] = round(first[0]["p99"] / first[1]["p99"], 3)
    print(f"warmed-up workers / cold ones, latency: {ratios}")
    return ratios


def _latency_pair(off: dict[str, Any], on: dict[str, Any]) -> dict[str, float]:
    """P50 and P99 with the overlap over those without it (below 1: lower latency)."""
    ratios = {f"{q}_on_to_off": round(on["latency_ms"][q] / off["latency_ms"][q], 3) for q in ("p50", "p99")}
    print(f"commit overlap on / off, latency: {ratios}")
    return ratios


if __name__ == "__main__":
    raise SystemExit(main())
