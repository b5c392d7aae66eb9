"""The stack is real: transactions on the broker, and Flink reading our Avro bytes."""

from __future__ import annotations

import io
from datetime import datetime
from typing import Any

import pytest
from fastavro import schemaless_writer

from llmpipe.kafka_io import KafkaSettings, Producer, TransactionalProducer, read_topic
from llmpipe.types import (
    BIGINT,
    DOUBLE,
    STRING,
    TIMESTAMP3,
    Array,
    Field,
    Row,
    StringMap,
    avro_schema,
    ddl_columns,
)

pytestmark = pytest.mark.integration


def test_transactions_show_only_committed_keys(kafka: KafkaSettings, new_topic: Any) -> None:
    topic = new_topic("txn", partitions=3)
    producer = TransactionalProducer(kafka, f"proof-{topic}")
    committed: set[bytes] = set()
    for batch in range(10):
        producer.begin()
        keys = [f"k{batch}-{i}".encode() for i in range(1000)]
        for key in keys:
            producer.produce(topic, b"v", key)
        if batch == 4:
            producer.abort()
        else:
            producer.commit()
            committed.update(keys)

    seen = [m.key for m in read_topic(kafka, topic)]
    assert len(seen) == 9000
    assert set(seen) == committed
    assert not any(key.startswith(b"k4-") for key in seen)
    uncommitted = read_topic(kafka, topic, isolation="read_uncommitted")
    assert sum(1 for m in uncommitted if m.key and m.key.startswith(b"k4-")) == 1000


PROOF_ROW = Row((
    Field("id", STRING),
    Field("n", BIGINT),
    Field("score", DOUBLE),
    Field("created", TIMESTAMP3),
    Field("tags", Array(STRING)),
    Field("attrs", StringMap()),
    Field("inner", Row((Field("a", STRING), Field("b", BIGINT)))),
))

ROWS: list[dict[str, Any]] = [
    {"id": "a", "n": 1, "score": 0.25, "created": 1_700_000_000_123, "tags": ["x", "y"],
     "attrs": {"u": "1"}, "inner": {"a": "é", "b": -5}},
    {"id": "b", "n": None, "score": None, "created": None, "tags": [], "attrs": {}, "inner": None},
    {"id": "c", "n": -(2**40), "score": -1.5, "created": 0, "tags": None, "attrs": None,
     "inner": {"a": None, "b": None}},
]


def test_flink_reads_avro_written_with_the_ddl_derived_schema(kafka: KafkaSettings, new_topic: Any) -> None:
    from jobs.flink_env import FlinkSettings, collect_rows, table_env

    topic = new_topic("avro")
    producer = Producer(kafka)
    schema = avro_schema(PROOF_ROW)
    for row in ROWS:
        buf = io.BytesIO()
        schemaless_writer(buf, schema, row)
        producer.produce(topic, buf.getvalue(), row["id"].encode())
    producer.flush()

    t_env = table_env(FlinkSettings(streaming=True))
    t_env.execute_sql(f"""
        CREATE TABLE proof ({", ".join(ddl_columns(PROOF_ROW))}) WITH (
          'connector' = 'kafka', 'topic' = '{topic}',
          'properties.bootstrap.servers' = '{kafka.bootstrap}',
          'properties.isolation.level' = 'read_committed',
          'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',
          'format' = 'avro')""")
    # Nested rows are flattened in SQL: PyFlink's collect() cannot unpickle a null inside a nested ROW.
    query = "SELECT id, n, score, created, tags, attrs, `inner`.a, `inner`.b, `inner` IS NULL FROM proof"
    rows = sorted(collect_rows(t_env, query), key=lambda r: r[0])

    assert [r[0] for r in rows] == ["a", "b", "c"]
    a, b, c = rows
    assert a[1:3] == (1, 0.25)
    assert a[3] == datetime(2023, 11, 14, 22, 13, 20, 123000)
    assert list(a[4]) == ["x", "y"] and a[5] == {"u": "1"}
    assert a[6:] == ("é", -5, False)
    assert b[1:4] == (None, None, None) and list(b[4]) == [] and b[5] == {} and b[6:] == (None, None, True)
    assert c[1] == -(2**40) and c[2] == -1.5 and c[3] == datetime(1970, 1, 1)
    assert c[4] is None and c[5] is None and c[6:] == (None, None, False)


def test_broker_starts_with_a_cluster_id_that_looks_like_an_option(tmp_path: Any) -> None:
    from stack import broker

    root = tmp_path / "kafka"
    run = broker.start(root, cluster_id="-" + broker.new_cluster_id()[1:])
    try:
        assert run.pid() is not None
        assert "cluster.id=-" in (root / "data" / "meta.properties").read_text()
    finally:
        assert broker.stop(root)
    assert run.pid() is None


def test_broker_runs_with_the_request_threads_asked_for(tmp_path: Any) -> None:
    """``--network-threads`` / ``--io-threads`` reach the running broker: its own config says so."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    from stack import broker

    root = tmp_path / "kafka"
    run = broker.start(root, network_threads=5, io_threads=9)
    try:
        admin = AdminClient({"bootstrap.servers": run.bootstrap()})
        resource = ConfigResource(ConfigResource.Type.BROKER, "1")
        entries = admin.describe_configs([resource])[resource].result(timeout=30)
        assert (entries["num.network.threads"].value, entries["num.io.threads"].value) == ("5", "9")
    finally:
        assert broker.stop(root)
    assert "num.network.threads=3" not in (root / "server.properties").read_text()
