"""The jobs read a Confluent-framed typed topic (``--schema-registry-url``) with Flink's ``avro-confluent``.

The same typed rows go to two topics, plain Avro and Confluent-framed (schema registered in the real
registry as gpu_stage registers it); the typed table over each must give the same rows, and a feature
job the same output.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

from jobs import model_minute
from jobs.flink_env import collect_rows, register_table, table_env
from jobs.typed_table import typed_table_ddl
from llmpipe.kafka_io import KafkaSettings, Producer
from llmpipe.registry import RegistryClient, frame, subject_for
from tests.integration.jobs.jobs_testlib import (
    FLINK,
    RECORD,
    at,
    job_settings,
    produce_typed,
    read_features,
    run_bounded,
    typed_row,
)
from tests.integration.jobs.test_jobs_model_minute import rows as minute_rows

pytestmark = pytest.mark.integration


def rich_rows() -> list[dict[str, Any]]:
    """Rows that use every kind of column: maps, arrays of rows, the nested content row, nulls."""
    out = []
    for i in range(40):
        out.append(typed_row(
            request_id=f"r{i}", completion_id=f"chatcmpl-{i}", object="chat.completion", created=at(0, i),
            model=f"m-{i % 3}", finish_reason="stop" if i % 4 else "length", stop_reason=None if i % 5 else "7",
            content_text=f"answer {i} — 答案", num_choices=2,
            choices=[{"index": 0, "finish_reason": "stop", "content": "a"},
                     {"index": 1, "finish_reason": None, "content": None}],
            prompt_tokens=i, completion_tokens=2 * i, total_tokens=3 * i, latency_ms=100 + i,
            attributes={"user_id": f"u{i % 7}", "arm": "b"} if i % 2 else {},
            metadata=None if i % 3 else {"k": "v"},
            content=None if i % 2 else {"sentiment": "neutral", "score": i / 40, "risk_level": "low"},
            content_valid=None if i % 2 else True, raw_partition=0, raw_offset=i, ingest_ts=at(1, i),
        ))
    return out


def produce_framed(kafka: KafkaSettings, topic: str, registry_url: str, rows: Iterable[dict[str, Any]]) -> int:
    """Register the typed schema under the topic's value subject and write the rows framed with its id."""
    with RegistryClient(registry_url) as registry:
        schema_id = registry.register(subject_for(topic), RECORD.avro)
    schema = parse_schema(RECORD.avro)
    producer = Producer(kafka)
    for i, row in enumerate(rows):
        buf = io.BytesIO()
        schemaless_writer(buf, schema, {**row, "raw_offset": row.get("raw_offset", i)})
        producer.produce(topic, frame(schema_id, buf.getvalue()), (row["request_id"] or "").encode())
    producer.flush()
    return schema_id


def test_typed_table_over_the_framed_topic_gives_the_plain_rows(
    kafka: KafkaSettings, new_topic: Any, schema_registry: str
) -> None:
    plain, framed = new_topic("typed"), new_topic("typedcf")
    produce_typed(kafka, plain, rich_rows())
    produce_framed(kafka, framed, schema_registry, rich_rows())
    settings = job_settings(kafka, plain, "unused")
    t_env = table_env(FLINK)
    register_table(t_env, "plain", typed_table_ddl("plain", RECORD, settings.typed))
    framed_source = replace(settings.typed, topic=framed, schema_registry_url=schema_registry)
    ddl = typed_table_ddl("framed", RECORD, framed_source)
    assert "'format' = 'avro-confluent'" in ddl
    register_table(t_env, "framed", ddl)

    # Every column as text: PyFlink's row collection cannot bring some nested types back to Python.
    columns = ", ".join(f"CAST(`{f.name}` AS STRING)" for f in RECORD.row.fields)
    want = sorted(collect_rows(t_env, f"SELECT {columns} FROM plain"), key=lambda r: r[0])
    got = sorted(collect_rows(t_env, f"SELECT {columns} FROM framed"), key=lambda r: r[0])
    assert len(want) == 40
    assert got == want


def test_a_feature_job_on_the_framed_topic_gives_the_plain_output(
    kafka: KafkaSettings, new_topic: Any, schema_registry: str
) -> None:
    plain, framed = new_topic("typed"), new_topic("typedcf")
    plain_out, framed_out = new_topic("features"), new_topic("features")
    produce_typed(kafka, plain, minute_rows())
    produce_framed(kafka, framed, schema_registry, minute_rows())
    run_bounded(table_env(FLINK), model_minute.build_job, job_settings(kafka, plain, plain_out))
    settings = job_settings(kafka, framed, framed_out)
    settings = replace(settings, typed=replace(settings.typed, schema_registry_url=schema_registry))
    run_bounded(table_env(FLINK), model_minute.build_job, settings)

    want = read_features(kafka, plain_out)
    assert len(want) == 7
    assert sorted(read_features(kafka, framed_out), key=repr) == sorted(want, key=repr)
