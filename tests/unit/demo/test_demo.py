"""The demo's own pieces: a deterministic prompt set, the independent feature recomputation, percentiles."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from demo import prompts
from demo.checks import Verdict, check_features, expected_model_minute
from demo.measure import percentiles


def test_prompt_set_is_deterministic_and_realistic() -> None:
    spec = prompts.PromptSet(requests=5000)
    first, second = list(prompts.lines(spec)), list(prompts.lines(spec))
    assert first == second
    assert len(first) == 5000
    good = [orjson.loads(line) for line in first if line.startswith(b"{") and b'"attributes"' in line]
    assert len(good) > 4950
    users = {r["attributes"]["user_id"] for r in good}
    assert 100 < len(users) <= spec.users
    assert {r["attributes"]["arm"] for r in good} == set(prompts.ARMS)
    assert all(r["attributes"]["arm"] == prompts.arm_of(r["attributes"]["user_id"]) for r in good)
    assert {r["model"] for r in good} == {m for m, _ in prompts.MODELS}
    assert len({r["request_id"] for r in good}) == len(good)


def _typed(created_s: int, model: str, **kw: object) -> dict[str, object]:
    row: dict[str, object] = {"created": datetime.fromtimestamp(created_s, UTC), "model": model,
                              "prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30, "latency_ms": 500,
                              "finish_reason": "stop", "content_valid": None, "tool_name": None,
                              "tool_arguments": None}
    row.update(kw)
    return row


def test_model_minute_recomputation_matches_a_correct_row_and_flags_a_wrong_one() -> None:
    t0 = 1_767_225_600  # a minute boundary
    typed = [_typed(t0 + 1, "a", content_valid=True), _typed(t0 + 59, "a", content_valid=False, latency_ms=None),
             _typed(t0 + 61, "a", finish_reason="length"), _typed(t0 + 2, "b", tool_name="get_weather")]
    want = expected_model_minute(typed)
    first = want[("a", t0 * 1000)]
    assert first["requests"] == 2
    assert first["latency_ms_mean"] == 500.0
    assert first["invalid_json_share"] == 0.5
    assert first["valid_json_tokens_per_s"] == 40.0
    assert want[("b", t0 * 1000)]["tool_call_share"] == 1.0

    def as_job(row: dict[str, object]) -> dict[str, object]:
        iso = lambda ms: datetime.fromtimestamp(int(ms) / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")  # type: ignore[arg-type]  # noqa: E731
        return {**row, "window_start": iso(row["window_start"]), "window_end": iso(row["window_end"])}

    good = Verdict()
    check_features(good, [as_job(r) for r in want.values()], typed)
    assert good.ok, good.results
    wrong = [as_job(r) for r in want.values()]
    wrong[0] = {**wrong[0], "requests": 99}
    bad = Verdict()
    check_features(bad, wrong, typed)
    assert not bad.ok


def test_percentiles_nearest_rank() -> None:
    assert percentiles(list(range(1, 101))) == {50: 50, 95: 95, 99: 99}
    assert percentiles([]) == {}
    assert percentiles([7.0]) == {50: 7.0, 95: 7.0, 99: 7.0}
