"""bench.kafka_client_cost end to end on a real broker: both consume paths read every record and header,
both produce paths commit every record (the bench raises otherwise), and the result holds each round."""

from __future__ import annotations

import json
from pathlib import Path

from bench import kafka_client_cost
from llmpipe.kafka_io import KafkaSettings


def test_every_path_reads_or_writes_every_record(kafka: KafkaSettings, tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    argv = ["--bootstrap", kafka.bootstrap, "--records", "3000", "--partitions", "3", "--batch", "1000",
            "--pool", "500", "--rounds", "1", "--out", str(out)]  # fmt: skip
    assert kafka_client_cost.main(argv) == 0
    result = json.loads(out.read_text())
    runs = result["runs"][0]
    assert set(runs) == {"consume_python", "consume_native", "produce_python", "produce_native"}
    assert {name: run["records"] for name, run in runs.items()} == dict.fromkeys(runs, 3000)
    assert runs["consume_native"]["headers"] == runs["consume_python"]["headers"] == 3000 * 7
    assert runs["consume_native"]["value_bytes"] == runs["produce_native"]["value_bytes"]
