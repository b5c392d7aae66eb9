"""``python -m bench.txn_start``: how long a transactional producer's first transactions take, alone.

The start-of-run latency tail (the first second of a latency run) sits in the workers' first
commits. This separates two start-up costs from the load itself: a topic's first transactional
writes, and a new transactional id's first transactions. One producer (the worker's settings:
``linger.ms`` 50, retries after 20 ms) runs back-to-back transactions of ``--records`` ~1 KB records
over every partition of a fresh topic, then further producers with new transactional ids do the same
on that topic, each alone. Prints and writes each transaction's milliseconds (begin to committed).
Not a test; the figures depend on the broker and its host.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from pathlib import Path
from typing import Any

from llmpipe.kafka_io import KafkaSettings, TransactionalProducer, create_topics, delete_topics


def transactions(kafka: KafkaSettings, topic: str, count: int, records: int) -> list[float]:
    """``count`` transactions of ``records`` records by a producer with a new transactional id; ms each."""
    producer = TransactionalProducer(kafka, f"txn-start-{uuid.uuid4().hex[:8]}", config={"linger.ms": 50})
    values, keys = [b"x" * 900] * records, [f"key-{j}".encode() for j in range(records)]
    took = []
    for _ in range(count):
        started = time.perf_counter()
        producer.begin()
        producer.produce_many(topic, values, keys)  # the keys hash over every partition
        producer.commit()
        took.append(round((time.perf_counter() - started) * 1e3, 1))
        time.sleep(0.02)
    return took


def main(argv: list[str] | None = None) -> int:
    """Run the producers one after another on one fresh topic; print and write their transactions' times."""
    p = argparse.ArgumentParser(prog="python -m bench.txn_start", description=__doc__)
    p.add_argument("--bootstrap", default="127.0.0.1:19092")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--transactions", type=int, default=25)
    p.add_argument("--records", type=int, default=300, help="records per transaction")
    p.add_argument("--producers", type=int, default=3, help="the first on the new topic, the others after it")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    kafka = KafkaSettings(bootstrap=args.bootstrap)
    topic = f"bench.txn-start.{uuid.uuid4().hex[:8]}"
    create_topics(kafka, {topic: args.partitions})
    try:
        runs: list[dict[str, Any]] = []
        for k in range(args.producers):
            took = transactions(kafka, topic, args.transactions, args.records)
            runs.append({"producer": k, "new_topic": k == 0, "ms": took})
            print(f"producer {k} ({'new topic' if k == 0 else 'topic written before'}): {took}")
    finally:
        delete_topics(kafka, [topic])
    result = {"bootstrap": args.bootstrap, "partitions": args.partitions, "records_per_transaction": args.records,
              "runs": runs}  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
