"""``python -m bench.fetch_backoff``: how fast one consumer reads a backlog, per ``fetch.queue.backoff.ms``.

Loads ``--records`` raw records (the e2e runs' bodies and connector headers) into a fresh topic of
``--partitions`` partitions, committed, then reads them all with a fresh ``read_committed`` group
member per run, through :meth:`llmpipe.kafka_io.Consumer.consume_records` (the worker's collect step,
nothing else), once per value of ``--backoffs`` in each of ``--rounds`` rounds (the values' order
alternates between rounds). The rate runs from the first record read to the last. Whenever the
reader is slower than the fetches, librdkafka's prefetch queue fills up, and the backoff is how long
it then stops fetching. Not a test; the figures depend on the host and the broker.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import uuid
from pathlib import Path
from typing import Any

from bench.e2e_worker import FETCH_BACKOFF_PAIR, load_raw
from gpu_stage.worker import CONSUME_MAX_RECORDS
from llmpipe.kafka_io import Consumer, KafkaSettings, delete_topics


def read_rate(kafka: KafkaSettings, topic: str, records: int, backoff_ms: int, timeout_s: float) -> float:
    """Records/s of one new group member reading ``records`` records of ``topic`` from the start."""
    consumer = Consumer(kafka, f"bench-fetch-{uuid.uuid4().hex[:8]}", [topic], fetch_backoff_ms=backoff_ms)
    try:
        got, first, started = 0, 0, 0.0
        deadline = time.monotonic() + timeout_s
        while got < records:
            if time.monotonic() > deadline:
                msg = f"read {got} of {records} records in {timeout_s:.0f}s"
                raise TimeoutError(msg)
            n = len(consumer.consume_records(CONSUME_MAX_RECORDS, 1.0))
            if n and not started:
                started, first = time.perf_counter(), n
            got += n
        return (got - first) / (time.perf_counter() - started)
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    """Load, read once per backoff and round, print and write the rates."""
    p = argparse.ArgumentParser(prog="python -m bench.fetch_backoff", description=__doc__)
    p.add_argument("--bootstrap", default="127.0.0.1:19092")
    p.add_argument("--records", type=int, default=400_000)
    p.add_argument("--partitions", type=int, default=2, help="the partitions one of 12 workers owns of 24")
    p.add_argument("--backoffs", default=",".join(map(str, FETCH_BACKOFF_PAIR)), help="ms, comma-separated")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--timeout-s", type=float, default=300.0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.records <= CONSUME_MAX_RECORDS:
        p.error(f"--records must exceed {CONSUME_MAX_RECORDS:,}: the rate counts the records after the first call")
    kafka = KafkaSettings(bootstrap=args.bootstrap)
    backoffs = [int(v) for v in args.backoffs.split(",")]
    topic = f"bench.fetch-backoff.{uuid.uuid4().hex[:8]}"
    load = load_raw(kafka, topic, args.records, args.partitions, pool=10_000)
    load.commit()
    runs: list[dict[str, Any]] = []
    try:
        for round_ in range(args.rounds):
            for backoff in backoffs if round_ % 2 == 0 else backoffs[::-1]:
                rate = read_rate(kafka, topic, args.records, backoff, args.timeout_s)
                runs.append({"round": round_, "fetch_backoff_ms": backoff, "records_per_s": round(rate, 1)})
                print(f"round {round_}: fetch.queue.backoff.ms {backoff}: {rate:,.0f} records/s")
    finally:
        delete_topics(kafka, [topic])
    result = {"host": platform.node(), "records": args.records, "partitions": args.partitions, "runs": runs}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
