"""``python -m bench.peer_vs_cpu``: records/s of the Flink-only peer job vs gpu_stage's CPU backend.

Same input for both: ``gpu_stage.synth`` bodies (~1 KB vLLM completions, same seed) with the worker's
keys and headers. The peer runs as deployed, ``llm.raw`` → ``bench.flink_peer_raw`` → typed Avro topic, on
the embedded mini-cluster at parallelism 2 over a 2-partition raw topic, bounded (``--until latest``);
its time is the whole job, start-up included, plus a marginal rate from a second, smaller run that
takes the start-up out. The CPU backend is timed on the same bodies in batches (transform and Avro
encoding, one core, no Kafka). Not a test: the figures depend on the machine and its neighbours.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import uuid
from pathlib import Path
from typing import Any

from bench import flink_peer_raw as peer_raw
from gpu_stage import synth
from gpu_stage.transform import NativeBackend
from jobs.cli import JobSettings
from jobs.flink_env import FlinkSettings, execute, table_env
from jobs.typed_table import ReadRange, TopicSource
from llmpipe.kafka_io import KafkaSettings, Producer, create_topics, delete_topics, end_offsets
from llmpipe.record import TypedRecord

RESULTS = Path(__file__).resolve().parent / "results"


def produce(kafka: KafkaSettings, topic: str, values: list[bytes]) -> None:
    """Write the bodies round-robin over two partitions, with the worker's keys, headers and times."""
    batch = synth.batch(values)
    producer = Producer(kafka)
    for i, value in enumerate(batch.values):
        producer.client.produce(topic, value, batch.keys[i], partition=i % 2,
                                headers=list(batch.headers[i]), timestamp=int(batch.timestamps_ms[i]))
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(120)


def run_peer(kafka: KafkaSettings, values: list[bytes], parallelism: int) -> dict[str, Any]:
    """One bounded peer job over fresh topics; the output count checks that it typed everything."""
    raw, typed = f"bench-raw-{uuid.uuid4().hex[:8]}", f"bench-peer-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, {raw: 2, typed: 2}, {"retention.ms": "-1"})  # synth timestamps are in the past
    try:
        produce(kafka, raw, values)
        flink = FlinkSettings(streaming=True, parallelism=parallelism)
        settings = JobSettings(typed=TopicSource(kafka, typed, ReadRange("earliest", "latest")), flink=flink)
        t_env = table_env(flink)
        start = time.perf_counter()
        execute(peer_raw.build_job(t_env, settings, raw_topic=raw))
        seconds = time.perf_counter() - start
        written = sum(end_offsets(kafka, typed).values())
    finally:
        delete_topics(kafka, [raw, typed])
    return {"records": len(values), "typed_out": written, "seconds": round(seconds, 3),
            "records_per_s": round(len(values) / seconds, 1)}


def run_cpu(values: list[bytes], batch_size: int) -> dict[str, Any]:
    """The CPU backend over the same bodies, batches built before the clock starts."""
    backend = NativeBackend()
    batches = [synth.batch(values[i : i + batch_size], i) for i in range(0, len(values), batch_size)]
    start = time.perf_counter()
    good = sum(len(backend.parse(b).encoded) for b in batches)
    seconds = time.perf_counter() - start
    return {"records": len(values), "typed_out": good, "seconds": round(seconds, 3),
            "records_per_s": round(len(values) / seconds, 1), "batch_size": batch_size}


def main(argv: list[str] | None = None) -> int:
    """Run both, print the figures and the ratio, write the JSON result."""
    p = argparse.ArgumentParser(prog="python -m bench.peer_vs_cpu", description=__doc__)
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:19092"))
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--small", type=int, default=20_000, help="second peer run, for the marginal rate")
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=10_000)
    args = p.parse_args(argv)
    kafka = KafkaSettings(bootstrap=args.bootstrap)
    values = synth.bodies(args.records)
    mean_bytes = sum(map(len, values)) / len(values)
    cpu = run_cpu(values, args.batch_size)
    print(f"cpu backend : {cpu['records_per_s']:>10,.0f} rec/s ({cpu['seconds']} s, {cpu['typed_out']} typed)")
    peer = run_peer(kafka, values, args.parallelism)
    print(f"flink peer  : {peer['records_per_s']:>10,.0f} rec/s ({peer['seconds']} s incl. start-up, "
          f"{peer['typed_out']} typed, parallelism {args.parallelism})")
    small = run_peer(kafka, values[: args.small], args.parallelism)
    marginal = (args.records - args.small) / max(peer["seconds"] - small["seconds"], 1e-9)
    print(f"flink peer  : {marginal:>10,.0f} rec/s marginal ({args.small} records took {small['seconds']} s)")
    ratio = cpu["records_per_s"] / peer["records_per_s"]
    print(f"ratio cpu/peer: {ratio:.1f}x (whole job), {cpu['records_per_s'] / marginal:.1f}x (marginal)")
    host = platform.node() or "host"
    result = {"host": host, "cpus": os.cpu_count(), "mean_body_bytes": round(mean_bytes, 1),
              "schema": TypedRecord.from_file().fingerprint, "cpu_backend": cpu, "peer": peer,
              "peer_small": small, "peer_marginal_records_per_s": round(marginal, 1),
              "ratio_cpu_over_peer": round(ratio, 2),
              "ratio_cpu_over_peer_marginal": round(cpu["records_per_s"] / marginal, 2),
              "load_avg": os.getloadavg()}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"peer-vs-cpu-{host}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
