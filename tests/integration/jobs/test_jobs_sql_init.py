"""The SQL Client init file: Flink's own ``sql-client.sh`` reads the topics through it.

The records are written here (typed Avro, dead letters, two jobs' feature rows in one topic); the
client runs the generated file and plain queries in batch mode, and the counts and values it prints
are compared with what was written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyflink
import pytest

from jobs import sql_init
from llmpipe.kafka_io import KafkaSettings, Producer
from stack.jars import jar_dir
from tests.integration.jobs.jobs_testlib import at, produce_typed, typed_row

pytestmark = pytest.mark.integration

FLINK_HOME = Path(pyflink.__file__).parent
QUERIES = """
SET 'sql-client.execution.result-mode' = 'tableau';
SET 'execution.runtime-mode' = 'batch';
SET 'execution.target' = 'local';
SELECT 'typed', model, COUNT(*) AS n, SUM(total_tokens) AS tokens FROM typed GROUP BY model;
SELECT 'dead', COUNT(*) AS n FROM dlq;
SELECT 'mm', model, requests FROM model_minute_features;
SELECT 'ab', arm, errors FROM ab_arm_features;
"""


def produce_features(kafka: KafkaSettings, topic: str) -> None:
    """Rows of two jobs in one topic, as their sinks write them (key = entity, JSON value)."""
    rows: list[tuple[str, dict[str, Any]]] = [
        ("m1", {"window_start": "2026-01-01T00:00:00", "window_end": "2026-01-01T00:01:00", "model": "m1",
                "requests": 7}),
        ("A", {"window_start": "2026-01-01T00:00:00", "window_end": "2026-01-01T00:01:00", "arm": "A",
               "requests": 2, "errors": 3}),
    ]
    producer = Producer(kafka)
    for key, value in rows:
        producer.produce(topic, json.dumps(value).encode(), key.encode())
    producer.flush()


def run_sql_client(init: Path, tmp_path: Path) -> str:
    """``sql-client.sh embedded -i init -f queries`` of the apache-flink distribution; its stdout."""
    queries = tmp_path / "queries.sql"
    queries.write_text(QUERIES)
    lib = tmp_path / "lib"  # a cluster's lib/: the distribution's jars, the connectors, the gateway
    lib.mkdir()
    for jar in [*(FLINK_HOME / "lib").glob("*.jar"), *jar_dir("flink").glob("*.jar"),
                *jar_dir("sql-client").glob("*.jar")]:
        (lib / jar.name).symlink_to(jar)
    env = {**os.environ, "FLINK_HOME": str(FLINK_HOME), "FLINK_LIB_DIR": str(lib),
           "FLINK_LOG_DIR": str(tmp_path), "PYFLINK_PYTHON": sys.executable}
    done = subprocess.run(["bash", str(FLINK_HOME / "bin" / "sql-client.sh"), "embedded", "-i", str(init),
                           "-f", str(queries), "-hist", str(tmp_path / "history")],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def table_rows(output: str, tag: str) -> list[list[str]]:
    """Cells of the tableau rows whose first cell is ``tag``."""
    rows = []
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and cells[0] == tag:
            rows.append(cells[1:])
    return rows


def test_sql_client_reads_every_topic_through_the_init_file(
    kafka: KafkaSettings, new_topic: Any, tmp_path: Path
) -> None:
    typed, dlq, features = new_topic("typed"), new_topic("dlq"), new_topic("features")
    produce_typed(kafka, typed, (
        typed_row(request_id=f"r{i}", created=at(0, i), model=f"m{i % 2}", total_tokens=10 + i) for i in range(9)))
    producer = Producer(kafka)
    for i in range(4):
        producer.produce(dlq, b"{broken", f"d{i}".encode())
    producer.flush()
    produce_features(kafka, features)
    init = tmp_path / "init.sql"
    code = sql_init.main(["--bootstrap", kafka.bootstrap, "--typed-topic", typed, "--dlq-topic", dlq,
                          "--features-topic", features, "--from", "earliest", "--until", "latest",
                          "--output", str(init)])
    assert code == 0
    output = run_sql_client(init, tmp_path)
    by_model = {model: (int(n), int(tokens)) for model, n, tokens in table_rows(output, "typed")}
    assert by_model == {"m0": (5, 5 * 10 + 0 + 2 + 4 + 6 + 8), "m1": (4, 4 * 10 + 1 + 3 + 5 + 7)}
    assert table_rows(output, "dead") == [["4"]]
    assert table_rows(output, "mm") == [["m1", "7"]]
    assert table_rows(output, "ab") == [["A", "3"]]
