"""bench.flink_peer_raw (Flink SQL alone) gives the same typed values as gpu_stage's CPU backend.

Same 5,000 raw records (gpu_stage's synthetic bodies plus hand-made content edge cases) go to Kafka
and through the CPU backend; both typed outputs are decoded with fastavro and compared column by
column, except the columns the peer cannot produce (``bench.flink_peer_sql.NOT_PRODUCED``).
"""

from __future__ import annotations

import copy
import io
from typing import Any

import fastavro
import orjson
import pytest

from bench import flink_peer_raw as peer_raw
from bench.flink_peer_sql import NOT_PRODUCED
from gpu_stage import synth
from gpu_stage.transform.batch import RawBatch
from gpu_stage.transform.contract.reference import ReferenceBackend
from jobs.flink_env import execute, table_env
from llmpipe.kafka_io import KafkaSettings, Producer, read_topic
from tests.integration.jobs.jobs_testlib import FLINK, RECORD, job_settings

pytestmark = pytest.mark.integration

N = 5000
CONTENTS = [
    '{"sentiment": "positive", ',  # invalid JSON
    "[1, 2]",  # not an object
    '{"sentiment": "positive", "score": 0.5}',  # missing risk_level
    '{"sentiment": "happy", "score": 0.5, "risk_level": "low"}',  # enum
    '{"sentiment": "neutral", "score": 1.5, "risk_level": "low"}',  # maximum
    '{"sentiment": "neutral", "score": -0.1, "risk_level": "low"}',  # minimum
    '{"sentiment": "neutral", "score": "0.5", "risk_level": "low"}',  # type
    '{"sentiment": "neutral", "score": 0.5, "risk_level": "low", "topics": [1]}',  # items
    '{"sentiment": "neutral", "score": 0.5, "risk_level": "low", "needs_review": "no"}',  # type
    '  ```JSON\n{"sentiment": "negative", "score": 1, "risk_level": "high", "topics": []}\n```  ',
    "```json",  # a fence with nothing after it: prose
    "Sure! Here is the answer.",
    '\n{"sentiment":"positive","score":0,"risk_level":"medium","topics":["a\\"b","é"],"needs_review":true}\n',
]


def raw_values() -> list[bytes]:
    values = synth.bodies(N - 4 * len(CONTENTS))
    template = next(orjson.loads(v) for v in values if b'"chat.completion"' in v)
    for i in range(4 * len(CONTENTS)):
        body = copy.deepcopy(template)
        body["id"] = f"chatcmpl-edge-{i}"
        body["created"] = 1740000000 + i
        body["choices"][0]["message"]["content"] = CONTENTS[i % len(CONTENTS)]
        body["choices"][0]["finish_reason"] = ["stop", "length"][i % 2]
        values.append(orjson.dumps(body))
    return values


def produce_raw(kafka: KafkaSettings, topic: str, batch: RawBatch) -> None:
    producer = Producer(kafka)
    for i, value in enumerate(batch.values):
        producer.client.produce(topic, value, batch.keys[i], headers=list(batch.headers[i]),
                                timestamp=int(batch.timestamps_ms[i]))
    producer.flush()


def plain_schema() -> Any:
    def strip(s: Any) -> Any:
        if isinstance(s, dict):
            return {k: strip(v) for k, v in s.items() if k != "logicalType"}
        return [strip(v) for v in s] if isinstance(s, list) else s
    return fastavro.parse_schema(strip(copy.deepcopy(RECORD.avro)))


def decode(values: list[bytes]) -> dict[str, dict[str, Any]]:
    schema = plain_schema()
    rows = [fastavro.schemaless_reader(io.BytesIO(v), schema, None) for v in values]
    return {r["request_id"]: r for r in rows}


def test_peer_matches_the_cpu_backend_on_5000_records(kafka: KafkaSettings, new_topic: Any) -> None:
    raw, typed = new_topic("raw"), new_topic("peer")
    batch = synth.batch(raw_values())
    assert len(batch) == N
    produce_raw(kafka, raw, batch)
    result = ReferenceBackend().parse(batch)
    want = decode([value for _pos, _key, value in result.encoded.items()])
    assert len(want) + len(result.bad) == N and result.bad  # the synthetic error bodies

    settings = job_settings(kafka, typed, "unused")
    execute(peer_raw.build_job(table_env(FLINK), settings, raw_topic=raw))
    got = decode([m.value or b"" for m in read_topic(kafka, typed)])

    assert got.keys() == want.keys()
    compared = [c for c in RECORD.field_names() if c not in NOT_PRODUCED]
    assert {w["content_error"] for w in want.values()} >= {"invalid_json", "not_an_object", "type:score"}
    for request_id, expected in want.items():
        row = got[request_id]
        for column in compared:
            assert row[column] == expected[column], (request_id, column, row[column], expected[column])
        for column in NOT_PRODUCED:
            assert row[column] is None
