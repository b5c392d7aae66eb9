"""jobs.model_minute on a real broker and mini-cluster: every output row equals the Python reference."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from jobs import model_minute
from jobs.flink_env import table_env
from llmpipe.kafka_io import KafkaSettings
from tests.integration.jobs.jobs_testlib import (
    FLINK,
    assert_row,
    at,
    counted,
    epoch_ms,
    job_settings,
    produce_typed,
    read_features,
    run_bounded,
    tumbling,
    typed_row,
)

pytestmark = pytest.mark.integration

# (created, model, prompt, completion, total, latency, finish, content_valid, tool) in arrival order.
SPECS: list[tuple[int, str | None, int | None, int | None, int | None, int | None, str, bool | None, bool]] = [
    (at(0, 5), "m-a", 10, 20, 30, 1000, "stop", True, False),
    (at(0, 10), "m-b", 5, 7, 12, 500, "length", False, False),
    (at(0, 59), "m-a", 1, 2, 3, None, "stop", None, True),
    (at(0, 30), "m-a", None, None, None, 2000, "length", True, False),  # out of order, in bound
    (at(1, 2), "m-a", 10, 10, 20, 800, "stop", True, False),
    (at(0, 58), "m-b", 3, 4, 7, 300, "stop", None, False),  # 4 s behind: still counted
    (at(1, 30), None, 1, 1, 2, 100, "stop", False, False),  # no model
    (at(2, 10), "m-a", 7, 8, 15, 1500, "length", True, True),
    (at(0, 40), "m-a", 100, 100, 200, 9999, "stop", True, False),  # late: dropped
    (at(2, 20), "m-b", 2, 3, 5, 0, "stop", True, False),  # zero latency: not in the speed
    (at(3, 1), "m-a", 4, 4, 8, 400, "stop", True, False),
    (at(2, 59), "m-a", 1, 1, 2, None, "stop", True, False),  # 2 s behind: counted
    (at(1, 59), "m-b", 50, 50, 100, 50, "stop", True, False),  # late: dropped
]


def rows() -> Iterator[dict[str, Any]]:
    for i, (created, model, p, c, t, lat, finish, valid, tool) in enumerate(SPECS):
        yield typed_row(
            request_id=f"r{i}", created=created, model=model, prompt_tokens=p, completion_tokens=c,
            total_tokens=t, latency_ms=lat, finish_reason=finish, content_valid=valid,
            tool_name="get_weather" if tool else None, tool_arguments='{"city":"Oslo"}' if tool else None,
        )


def expected() -> dict[tuple[int, str | None], dict[str, Any]]:
    groups: dict[tuple[int, str | None], list[dict[str, Any]]] = defaultdict(list)
    for (start, _end), row in counted(((r["created"], r) for r in rows()), tumbling):
        groups[(start, row["model"])].append(row)
    out = {}
    for key, rs in groups.items():
        n = len(rs)

        def total(col: str, rs: list[dict[str, Any]] = rs) -> int | None:
            values = [r[col] for r in rs if r[col] is not None]
            return sum(values) if values else None

        lats = [r["latency_ms"] for r in rs if r["latency_ms"] is not None]
        fast = [r for r in rs if r["content_valid"] and (r["latency_ms"] or 0) > 0
                and r["completion_tokens"] is not None]
        out[key] = {
            "window_end": key[0] + 60_000, "model": key[1], "requests": n,
            "prompt_tokens": total("prompt_tokens"), "completion_tokens": total("completion_tokens"),
            "total_tokens": total("total_tokens"),
            "latency_ms_mean": sum(lats) / len(lats) if lats else None,
            "latency_ms_max": max(lats) if lats else None,
            "length_share": sum(r["finish_reason"] == "length" for r in rs) / n,
            "invalid_json_share": sum(r["content_valid"] is False for r in rs) / n,
            "tool_call_share": sum(r["tool_name"] is not None for r in rs) / n,
            "valid_json_tokens_per_s": (sum(r["completion_tokens"] for r in fast) * 1000
                                        / sum(r["latency_ms"] for r in fast)) if fast else None,
        }
    return out


def test_model_minute_rows_equal_the_reference(kafka: KafkaSettings, new_topic: Any) -> None:
    typed, features = new_topic("typed"), new_topic("features")
    produce_typed(kafka, typed, rows())
    run_bounded(table_env(FLINK), model_minute.build_job, job_settings(kafka, typed, features))

    want = expected()
    got = read_features(kafka, features)
    assert len(got) == len(want)
    assert len(want) == 7  # 4 windows: m-a in all, m-b in 0 and 2, no model in 1
    for key, value in got:
        assert key == value["model"]
        start = epoch_ms(value.pop("window_start"))
        value["window_end"] = epoch_ms(value["window_end"])
        assert_row(value, want[(start, value["model"])], (start, value["model"]))
