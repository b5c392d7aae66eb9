"""``python -m bench.kafka_client_cost``: CPU per record of the worker's Kafka traffic, by client.

Through the broker, the workers' CPU per record is what bounds the rate: the worker's own threads
and librdkafka's. This measures the two halves of that traffic alone, each in a process of its own,
on the same broker and records:

- consume: ``--records`` committed raw records (real-shaped bodies, the connector's seven headers,
  ``--partitions`` partitions) read from the start by the worker's collect path
  (:meth:`llmpipe.kafka_io.Consumer.consume_records` then :func:`gpu_stage.worker.batches.to_batch`,
  the named baseline), and by :class:`llmpipe.kafka_io.PackedReader` (librdkafka driven by the native
  core through the Rust ``rdkafka`` crate), which writes each record into packed columns
  (:mod:`gpu_stage.transform.packed`'s layout) with no Python object per record;
- produce: as many records of the same values into a fresh topic, one header each, in transactions of
  ``--batch`` records, by :meth:`llmpipe.kafka_io.TransactionalProducer.produce_many` (the worker's
  ``--kafka-writer objects`` path, the baseline) and by :meth:`llmpipe.kafka_io.PackedWriter.produce_rows`
  (``--kafka-writer packed``: the values one buffer, the keys a packed column, one call per transaction).

Each run counts its process's CPU (every thread) from its first record to its last. Each consume run
must read every record, the same value bytes and seven headers a record; each produce run's topic
must then hold every record, committed. Not a test: the figures depend on the host and the broker.
"""

from __future__ import annotations

import argparse
import json
import platform
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench import real_corpus
from bench.e2e_worker import HEADERS as CONNECTOR_HEADERS
from gpu_stage.worker import CONSUME_MAX_RECORDS
from gpu_stage.worker.batches import to_batch
from llmpipe.kafka_io import (
    Consumer,
    KafkaSettings,
    PackedReader,
    PackedWriter,
    TransactionalProducer,
    create_topics,
    delete_topics,
    end_offsets,
)
from llmpipe.record import FINGERPRINT_HEADER

TYPED_HEADERS = [(FINGERPRINT_HEADER, b"0123456789abcdef")]
"""The one header the worker writes on every typed record (a fingerprint as long as its own)."""
PRODUCER_CONFIG = {
    "linger.ms": 50, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1 << 20,
}  # fmt: skip
"""The worker's producer settings (``gpu_stage.worker.producer``)."""


def _read_all(take: Callable[[], tuple[int, int, Any]], records: int, timeout_s: float) -> tuple[Any, ...]:
    """Call ``take`` (records, value bytes, something to keep) until ``records`` came.

    CPU seconds (every thread) and wall seconds from the first record, then the records, their value
    bytes and what each call kept.
    """
    got = value_bytes = 0
    started = cpu_at_start = 0.0
    kept = []
    deadline = time.monotonic() + timeout_s
    while got < records:
        if time.monotonic() > deadline:
            msg = f"read {got} of {records} records in {timeout_s:.0f}s"
            raise TimeoutError(msg)
        n, nbytes, keep = take()
        if n and not started:
            started, cpu_at_start = time.perf_counter(), time.process_time()
        got, value_bytes = got + n, value_bytes + nbytes
        kept.append(keep)
    return time.process_time() - cpu_at_start, time.perf_counter() - started, got, value_bytes, kept


def _run(cpu: float, wall: float, records: int, value_bytes: int, headers: int) -> dict[str, Any]:
    return {"records": records, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "value_bytes": value_bytes,
            "headers": headers}  # fmt: skip


def python_consume(kafka: KafkaSettings, topic: str, records: int, timeout_s: float = 300.0) -> dict[str, Any]:
    """Read ``records`` records of ``topic`` the way the worker collects them; CPU from the first record."""
    consumer = Consumer(kafka, f"bench-client-{uuid.uuid4().hex[:8]}", [topic], config={"fetch.max.bytes": 64 << 20})

    def take() -> tuple[int, int, int]:
        consumed = consumer.consume_records(CONSUME_MAX_RECORDS, 0.5)
        batch = to_batch(consumed)
        return len(batch), consumed.nbytes, sum(map(len, batch.headers))

    try:
        cpu, wall, got, value_bytes, headers = _read_all(take, records, timeout_s)
    finally:
        consumer.close()
    return _run(cpu, wall, got, value_bytes, sum(headers))


def packed_consume(kafka: KafkaSettings, topic: str, records: int, timeout_s: float = 300.0) -> dict[str, Any]:
    """Read ``records`` records of ``topic`` into packed columns; CPU from the first record.

    The headers are counted after the clock stops (a Python loop over each one, not part of reading).
    """
    reader = PackedReader(kafka, f"bench-client-{uuid.uuid4().hex[:8]}", [topic], config={"fetch.max.bytes": 64 << 20})

    def take() -> tuple[int, int, Any]:
        columns = reader.consume_packed(CONSUME_MAX_RECORDS, 0.5)
        return (0, 0, None) if columns is None else (len(columns), columns.nbytes, columns.header_buf)

    try:
        cpu, wall, got, value_bytes, header_bufs = _read_all(take, records, timeout_s)
    finally:
        reader.close()
    return _run(cpu, wall, got, value_bytes, sum(count_headers(bytes(b)) for b in header_bufs if b is not None))


def count_headers(encoded: bytes) -> int:
    """How many headers a packed header buffer holds (each: name length, name, value length, value)."""
    count, at = 0, 0
    while at < len(encoded):
        (name_len,) = struct.unpack_from("<I", encoded, at)
        (value_len,) = struct.unpack_from("<i", encoded, at + 4 + name_len)
        at += 8 + name_len + max(value_len, 0)
        count += 1
    return count


Piece = tuple[list[bytes], list[bytes], list[int]]
"""One transaction's values, keys and partitions."""


def _pieces(records: int, batch: int, partitions: int, values: list[bytes]) -> list[Piece]:
    """The rows of each transaction: the worker has them at hand when it produces, so made before the clock."""
    spans = (range(first, min(first + batch, records)) for first in range(0, records, batch))
    return [
        ([values[i % len(values)] for i in rows], [f"req-{i:09d}".encode() for i in rows],
         [i % partitions for i in rows])
        for rows in spans
    ]  # fmt: skip


def _timed_produce(pieces: list[Any], records: int, value_bytes: int, write: Callable[[Any], None]) -> dict[str, Any]:
    started, cpu_at_start = time.perf_counter(), time.process_time()
    for piece in pieces:
        write(piece)
    cpu, wall = time.process_time() - cpu_at_start, time.perf_counter() - started
    return {"records": records, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "value_bytes": value_bytes}


def python_produce(kafka: KafkaSettings, topic: str, records: int, batch: int, partitions: int,
                   values: list[bytes]) -> dict[str, Any]:  # fmt: skip
    """Write ``records`` records as the worker's objects writer does, in transactions of ``batch``."""
    producer = TransactionalProducer(kafka, f"bench-client-{uuid.uuid4().hex[:8]}", config=PRODUCER_CONFIG)
    pieces = _pieces(records, batch, partitions, values)

    def write(piece: Piece) -> None:
        producer.begin()
        producer.produce_many(topic, *piece[:2], TYPED_HEADERS, piece[2])
        producer.commit()

    return _timed_produce(pieces, records, sum(sum(map(len, p[0])) for p in pieces), write)


def packed_produce(kafka: KafkaSettings, topic: str, records: int, batch: int, partitions: int,
                   values: list[bytes]) -> dict[str, Any]:  # fmt: skip
    """The same records as the worker's packed writer writes them: buffers, one call per transaction."""
    writer = PackedWriter(kafka, f"bench-client-{uuid.uuid4().hex[:8]}", config=PRODUCER_CONFIG)
    packed = []
    for chosen, keys, parts in _pieces(records, batch, partitions, values):
        ends = np.cumsum([0, *map(len, chosen)], dtype=np.int64)
        key_ends = np.cumsum([len(k) for k in keys], dtype=np.int64)
        key_column = (np.frombuffer(b"".join(keys), dtype=np.uint8), key_ends, np.zeros(len(keys), dtype=np.uint8),
                      np.arange(len(keys), dtype=np.int64))  # fmt: skip
        packed.append((b"".join(chosen), ends, key_column, np.asarray(parts, dtype=np.int64)))

    def write(piece: tuple[bytes, Any, Any, Any]) -> None:
        buf, ends, key_column, parts = piece
        writer.begin()
        writer.produce_rows(topic, buf, ends, key_column, TYPED_HEADERS, parts)
        writer.commit()

    return _timed_produce(packed, records, sum(len(p[0]) for p in packed), write)


def per_record(run: dict[str, Any]) -> float:
    """CPU µs per record of one run."""
    return round(float(run["cpu_s"]) / int(run["records"]) * 1e6, 3)


def check_consume(run: dict[str, Any], records: int, value_bytes: int) -> None:
    """Raise unless a consume run read every record, its bytes and the connector's headers."""
    want = {"records": records, "value_bytes": value_bytes, "headers": records * len(CONNECTOR_HEADERS)}
    got = {k: run.get(k) for k in want}
    if got != want:
        msg = f"a consume run read {got}, not {want}"
        raise RuntimeError(msg)


def committed_records(kafka: KafkaSettings, topic: str, records: int, partitions: int, transactions: int) -> int:
    """Records in ``topic``: its end offsets less one commit marker per partition and transaction."""
    return sum(end_offsets(kafka, topic).values()) - min(partitions, records) * transactions


def _child(argv: list[str]) -> dict[str, Any]:
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def load(kafka: KafkaSettings, args: argparse.Namespace, values: list[bytes]) -> tuple[str, int]:
    """A fresh raw topic holding ``--records`` committed records; its name and their value bytes."""
    raw = f"bench-client-raw-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, {raw: args.partitions})
    loader = TransactionalProducer(kafka, f"bench-client-load-{uuid.uuid4().hex[:8]}", timeout_s=300,
                                   config=PRODUCER_CONFIG)  # fmt: skip
    chosen = [values[i % len(values)] for i in range(args.records)]
    loader.begin()
    loader.produce_many(raw, chosen, (f"req-{i:09d}".encode() for i in range(args.records)), CONNECTOR_HEADERS)
    loader.commit()
    return raw, sum(map(len, chosen))


def one_round(kafka: KafkaSettings, args: argparse.Namespace, raw: str,
              value_bytes: int) -> tuple[dict[str, dict[str, Any]], list[str]]:  # fmt: skip
    """Both consume paths, then both produce paths, each checked; the runs and the topics made."""
    me = [sys.executable, "-m", "bench.kafka_client_cost", "--bootstrap", args.bootstrap]
    n, batch, parts = str(args.records), str(args.batch), str(args.partitions)
    runs = {
        "consume_python": _child([*me, "--child-consume", raw, "--records", n]),
        "consume_native": _child([*me, "--child-consume-native", raw, "--records", n]),
    }
    for name in ("consume_python", "consume_native"):
        check_consume(runs[name], args.records, value_bytes)
    made = []
    for path in ("python", "native"):
        typed = f"bench-client-typed-{uuid.uuid4().hex[:8]}"
        create_topics(kafka, {typed: args.partitions})
        made.append(typed)
        child = "--child-produce" if path == "python" else "--child-produce-native"
        command = [*me, child, typed, "--records", n, "--batch", batch, "--partitions", parts, "--pool", str(args.pool)]
        runs[f"produce_{path}"] = run = _child(command)
        transactions = -(-args.records // args.batch)
        found = committed_records(kafka, typed, args.records, args.partitions, transactions)
        if found != args.records or run["value_bytes"] != value_bytes:
            msg = f"{path} produce: {found} records and {run['value_bytes']} value bytes committed, not " \
                  f"{args.records} and {value_bytes}"  # fmt: skip
            raise RuntimeError(msg)
    return runs, made


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Load once, then each round: both consume paths, both produce paths; the per-round figures."""
    kafka = KafkaSettings(bootstrap=args.bootstrap)
    values = real_corpus.generate(args.pool).values
    raw, value_bytes = load(kafka, args, values)
    rounds, made = [], [raw]
    try:
        for _ in range(args.rounds):
            runs, topics = one_round(kafka, args, raw, value_bytes)
            rounds.append(runs)
            made += topics
    finally:
        delete_topics(kafka, made)
    return summarize(args, rounds)


def ratio(new: float, base: float) -> float | None:
    """``new / base``; None for a baseline too short to have a CPU time (a run of few records)."""
    return round(new / base, 3) if base > 0 else None


def summarize(args: argparse.Namespace, rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per round, each path's CPU µs per record and native over Python for each half."""
    table = []
    for runs in rounds:
        us = {name: per_record(r) for name, r in runs.items()}
        table.append({
            **{f"{name}_us_per_record": v for name, v in us.items()},
            "consume_native_over_python": ratio(us["consume_native"], us["consume_python"]),
            "produce_native_over_python": ratio(us["produce_native"], us["produce_python"]),
            "saved_us_per_record": round(us["consume_python"] + us["produce_python"]
                                         - us["consume_native"] - us["produce_native"], 3),
        })  # fmt: skip
    return {
        "machine": {"host": platform.node(), "python": platform.python_version()},
        "records": args.records, "partitions": args.partitions, "batch": args.batch, "corpus": "real",
        "headers_per_raw_record": len(CONNECTOR_HEADERS), "rounds": table, "runs": rounds,
        "argv": sys.argv[1:],
    }  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options; a count below one exits 2 with one line."""
    p = argparse.ArgumentParser(prog="python -m bench.kafka_client_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default="127.0.0.1:19092")
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--batch", type=int, default=50_000, help="records per produce transaction")
    p.add_argument("--pool", type=int, default=20_000, help="distinct real-shaped bodies, cycled")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path)
    p.add_argument("--child-consume", default="", help=argparse.SUPPRESS)
    p.add_argument("--child-consume-native", default="", help=argparse.SUPPRESS)
    p.add_argument("--child-produce", default="", help=argparse.SUPPRESS)
    p.add_argument("--child-produce-native", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("records", "partitions", "batch", "pool", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print them (or, in a child process, one path's run as a JSON line)."""
    args = parse_args(argv)
    kafka = KafkaSettings(bootstrap=args.bootstrap)
    if args.child_consume:
        print(json.dumps(python_consume(kafka, args.child_consume, args.records)))
        return 0
    if args.child_consume_native:
        print(json.dumps(packed_consume(kafka, args.child_consume_native, args.records)))
        return 0
    for topic, produce in ((args.child_produce, python_produce), (args.child_produce_native, packed_produce)):
        if topic:
            values = real_corpus.generate(args.pool).values
            print(json.dumps(produce(kafka, topic, args.records, args.batch, args.partitions, values)))
            return 0
    result = run(args)
    for i, row in enumerate(result["rounds"], 1):
        print(f"round {i}: CPU µs per record, consume python {row['consume_python_us_per_record']} / native "
              f"{row['consume_native_us_per_record']} ({row['consume_native_over_python']}x); produce python "
              f"{row['produce_python_us_per_record']} / native {row['produce_native_us_per_record']} "
              f"({row['produce_native_over_python']}x); saved {row['saved_us_per_record']} µs per record")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
