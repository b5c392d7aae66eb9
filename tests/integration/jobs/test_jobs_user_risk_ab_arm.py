"""jobs.user_risk and jobs.ab_arm on a real broker and mini-cluster, against Python references."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from connector import records
from connector.http import Failure
from connector.records import Origin, Out
from connector.requests import Request
from gpu_stage.transform import RawBatch
from gpu_stage.transform.api import dead_letter
from jobs import ab_arm, user_risk
from jobs.flink_env import table_env
from llmpipe import headers
from llmpipe.dlq import HEADER_STAGE, STAGE_CONNECTOR, Reason
from llmpipe.kafka_io import KafkaSettings, Producer
from tests.integration.jobs.jobs_testlib import (
    FLINK,
    MINUTE,
    assert_row,
    at,
    counted,
    epoch_ms,
    hopping,
    job_settings,
    produce_typed,
    read_features,
    run_bounded,
    tumbling,
    typed_row,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def t_env() -> Any:
    return table_env(FLINK)


def content(score: float | None, risk: str | None) -> dict[str, Any]:
    return {"sentiment": "neutral", "score": score, "risk_level": risk, "topics": ["t"], "needs_review": None}


# (created, user_id, content or None) in arrival order.
RISK: list[tuple[int, str | None, dict[str, Any] | None]] = [
    (at(0, 10), "u1", content(0.2, "low")),
    (at(0, 10), "u1", content(0.4, "high")),  # same second: the later offset is the latest
    (at(0, 30), "u2", None),  # prose: no score, no risk
    (at(1, 20), "u1", content(0.9, "high")),
    (at(1, 5), "u1", content(0.5, "medium")),  # out of order, in bound: not the latest
    (at(1, 30), None, content(0.1, "high")),  # no user: left out
    (at(2, 0), "u2", content(None, "medium")),  # content without a score
    (at(6, 30), "u1", content(0.7, "low")),
    (at(0, 50), "u1", content(1.0, "high")),  # late for every window containing it: dropped
    (at(3, 10), "u2", content(None, "high")),  # late for windows ending 4-6 min, counted in 7-8
    (at(6, 40), "u3", content(0.3, None)),  # no risk level: latest stays null
]


def risk_rows() -> Iterator[dict[str, Any]]:
    for i, (created, user, body) in enumerate(RISK):
        yield typed_row(request_id=f"r{i}", created=created, raw_offset=i, content=body,
                        attributes=None if user is None else {"user_id": user, "arm": "A"})


def risk_expected() -> dict[tuple[int, str], dict[str, Any]]:
    groups: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for (start, _end), row in counted(((r["created"], r) for r in risk_rows()), hopping):
        if row["attributes"] is not None:
            groups[(start, row["attributes"]["user_id"])].append(row)
    out = {}
    for (start, user), rs in groups.items():
        scores = [r["content"]["score"] for r in rs if r["content"] and r["content"]["score"] is not None]
        levels = sorted((r["created"], r["raw_offset"], r["content"]["risk_level"]) for r in rs
                        if r["content"] and r["content"]["risk_level"] is not None)
        out[(start, user)] = {
            "window_end": start + 5 * MINUTE, "user_id": user, "requests": len(rs),
            "score_mean": sum(scores) / len(scores) if scores else None,
            "high_risk": sum(1 for r in rs if r["content"] and r["content"]["risk_level"] == "high"),
            "latest_risk_level": levels[-1][2] if levels else None,
        }
    return out


def check(got: list[tuple[str | None, dict[str, Any]]], want: dict[tuple[int, str], Any], key: str) -> None:
    assert len(got) == len(want)
    for k, value in got:
        assert k == value[key]
        start = epoch_ms(value.pop("window_start"))
        value["window_end"] = epoch_ms(value["window_end"])
        assert_row(value, want[(start, value[key])], (start, value[key]))


def test_user_risk_rows_equal_the_reference(t_env: Any, kafka: KafkaSettings, new_topic: Any) -> None:
    typed, features = new_topic("typed"), new_topic("features")
    produce_typed(kafka, typed, risk_rows())
    run_bounded(t_env, user_risk.build_job, job_settings(kafka, typed, features))
    want = risk_expected()
    assert want[(at(-3, 0), "u1")]["latest_risk_level"] == "high"  # the tie, by offset
    assert want[(at(-4, 0), "u2")]["score_mean"] is None  # a user with no score
    # 3:10 is late for the window ending at 4 min, counted in those ending at 7 and 8
    assert want[(at(-1, 0), "u2")]["requests"] == 2 and want[(at(3, 0), "u2")]["requests"] == 1
    check(read_features(kafka, features), want, "user_id")


# (created, arm, total_tokens, latency, content_valid) in arrival order; none is late.
AB: list[tuple[int, str | None, int | None, int | None, bool | None]] = [
    (at(0, 5), "A", 100, 1000, True),
    (at(0, 20), "B", 50, 500, False),
    (at(0, 40), "A", None, 700, None),
    (at(0, 35), "A", 30, None, True),
    (at(1, 10), "B", 80, 400, True),
    (at(1, 15), None, 10, 10, True),
    (at(1, 50), "A", 60, 600, False),
    (at(2, 30), "B", 20, 200, True),
]
# (Kafka timestamp, attributes header or None): dead letters.
DEAD: list[tuple[int, bytes | None]] = [
    (at(0, 15), b'{"arm":"A","user_id":"u1"}'),
    (at(0, 50), b'{"arm":"B"}'),
    (at(1, 20), b'{"arm":"A"}'),
    (at(1, 25), None),  # no attributes header: no arm, not counted
    (at(1, 40), b'{"arm":"C"}'),  # an arm with errors only
    (at(2, 5), b"not json"),  # unreadable attributes: not counted
]
# Dead letters made by the stages' own code: (Kafka timestamp, arm the job must find, record).
REQUEST = Request("r-9", "m", b'{"model":"m"}', b'{"arm":"B","user_id":"u9"}')
ORIGIN = Origin("llm.requests", 0, 3, b'{"request_id":"r-9","attributes":{"arm":"B"}}')
RAW_BATCH = RawBatch(values=[b"{broken"], keys=[b"r-8"], partitions=np.array([0]), offsets=np.array([11]),
                     timestamps_ms=np.array([0]),
                     topic="llm.raw", headers=[[(headers.ATTRIBUTES, b'{"arm":"A"}')]])


def stage_dead() -> list[tuple[int, str | None, Out]]:
    http = records.failed_record("dlq", ORIGIN, REQUEST, Failure(Reason.HTTP_STATUS, "HTTP 400", 1, 400), 10**6)
    retries = records.failed_record("dlq", ORIGIN, REQUEST, Failure(Reason.RETRIES_EXHAUSTED, "timeout", 4), 10**6)
    parsed = dead_letter(RAW_BATCH, 0, "gpu_stage", Reason.INVALID_JSON, "bad")
    # A connector dead letter written before it carried the attributes header: the value has them.
    legacy = Out("dlq", b"r-7", b'{"request_id":"r-7","attributes":{"arm":"C"}}',
                 [(HEADER_STAGE, STAGE_CONNECTOR.encode())], "http_status")
    return [
        (at(0, 25), "B", http),
        (at(1, 5), "B", retries),
        (at(1, 30), "A", Out("dlq", parsed.key, parsed.raw, parsed.headers(), "invalid_json")),
        (at(2, 10), "C", legacy),
    ]


def produce_dead(kafka: KafkaSettings, topic: str) -> None:
    producer = Producer(kafka)
    for i, (ts, attrs) in enumerate(DEAD):
        hdrs = [("__dlq.reason", b"invalid_json")] + ([(headers.ATTRIBUTES, attrs)] if attrs else [])
        producer.client.produce(topic, b"{broken", f"d{i}".encode(), headers=hdrs, timestamp=ts)
    for ts, _arm, out in stage_dead():
        producer.client.produce(topic, out.value, out.key, headers=out.headers, timestamp=ts)
    producer.flush()


def ab_expected() -> dict[tuple[int, str], dict[str, Any]]:
    events = [(c, ("ok", arm, tok, lat, valid)) for c, arm, tok, lat, valid in AB if arm]
    for ts, attrs in DEAD:
        try:
            arm = json.loads(attrs or b"null")["arm"]
        except (ValueError, TypeError):
            continue
        events.append((ts, ("err", arm, None, None, None)))
    events += [(ts, ("err", arm, None, None, None)) for ts, arm, _out in stage_dead()]
    groups: dict[tuple[int, str], list[tuple[Any, ...]]] = defaultdict(list)
    for (start, _end), event in counted(sorted(events, key=lambda e: e[0]), tumbling):
        groups[(start, event[1])].append(event)
    out = {}
    for (start, arm), es in groups.items():
        ok = [e for e in es if e[0] == "ok"]
        errors = len(es) - len(ok)
        tokens = [e[2] for e in ok if e[2] is not None]
        lats = [e[3] for e in ok if e[3] is not None]
        out[(start, arm)] = {
            "window_end": start + MINUTE, "arm": arm, "requests": len(ok), "errors": errors,
            "tokens_per_request": sum(tokens) / len(tokens) if tokens else None,
            "latency_ms_mean": sum(lats) / len(lats) if lats else None,
            "content_valid_rate": sum(1 for e in ok if e[4]) / len(ok) if ok else None,
            "error_rate": errors / len(es),
        }
    return out


def test_ab_arm_rows_equal_the_reference(t_env: Any, kafka: KafkaSettings, new_topic: Any) -> None:
    typed, dlq, features = new_topic("typed"), new_topic("dlq"), new_topic("features")
    produce_typed(kafka, typed, (
        typed_row(request_id=f"a{i}", created=c, total_tokens=tok, latency_ms=lat, content_valid=valid,
                  attributes=None if arm is None else {"arm": arm})
        for i, (c, arm, tok, lat, valid) in enumerate(AB)))
    produce_dead(kafka, dlq)
    run_bounded(t_env, ab_arm.build_job, job_settings(kafka, typed, features, dlq))
    want = ab_expected()
    assert want[(at(1, 0), "C")]["content_valid_rate"] is None
    check(read_features(kafka, features), want, "arm")
