"""Injected faults, error bodies and determinism under a seed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import httpx
import openai
import pytest

from vllm_sim.config import FaultRates, SimConfig
from vllm_sim.testing import running

MSG = [{"role": "user", "content": "hello"}]
Faulty = Callable[..., AbstractContextManager[str]]


def _client(url: str, timeout: float = 5) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=timeout)


@pytest.mark.parametrize(
    ("rate", "error", "status"),
    [
        ("rate_429", openai.RateLimitError, 429),
        ("rate_500", openai.InternalServerError, 500),
        ("rate_503", openai.InternalServerError, 503),
        ("rate_400", openai.BadRequestError, 400),
    ],
)
def test_status_faults_have_nested_error_bodies(
    faulty: Faulty, rate: str, error: type[openai.APIStatusError], status: int
) -> None:
    with faulty(**{rate: 1.0}) as url, pytest.raises(error) as caught:
        _client(url).chat.completions.create(model="m", messages=MSG)  # type: ignore[arg-type]
    body = json.loads(caught.value.response.content)
    assert set(body) == {"error"}
    assert body["error"]["code"] == status and set(body["error"]) == {"message", "type", "param", "code"}
    if status == 429:
        assert caught.value.response.headers["Retry-After"] == "1"


@pytest.mark.parametrize("rate", ["rate_reset", "rate_truncate"])
def test_broken_connections(faulty: Faulty, rate: str) -> None:
    with faulty(**{rate: 1.0}) as url, pytest.raises(openai.APIConnectionError):
        _client(url).chat.completions.create(model="m", messages=MSG)  # type: ignore[arg-type]


def test_hang_exceeds_client_timeout() -> None:
    with running(SimConfig(faults=FaultRates(rate_hang=1.0, hang_s=5))) as url:
        start = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            _client(url, timeout=0.3).chat.completions.create(model="m", messages=MSG)  # type: ignore[arg-type]
        assert time.monotonic() - start < 2


def test_invalid_request_is_400() -> None:
    with running(SimConfig()) as url:
        resp = httpx.post(f"{url}/v1/chat/completions", content=b"{not json")
        assert resp.status_code == 400 and resp.json()["error"]["type"] == "BadRequestError"
        assert httpx.post(f"{url}/v1/chat/completions", json={"model": "m"}).status_code == 400


def _bodies(seed: int, order: list[int]) -> dict[int, dict[str, object]]:
    out = {}
    with running(SimConfig(seed=seed)) as url:
        for i in order:
            body = httpx.post(
                f"{url}/v1/chat/completions", json={"messages": MSG}, headers={"X-Request-Id": f"d-{i}"}
            ).json()
            body.pop("created")
            out[i] = body
    return out


def test_deterministic_regardless_of_order() -> None:
    forward = _bodies(3, list(range(20)))
    backward = _bodies(3, list(reversed(range(20))))
    assert forward == backward
    assert _bodies(4, list(range(20))) != forward


def test_fault_rate_is_close_to_configured() -> None:
    rates = FaultRates(rate_500=0.1, rate_503=0.1)
    with running(SimConfig(seed=9, faults=rates)) as url, httpx.Client() as http:
        codes = [
            http.post(
                f"{url}/v1/chat/completions", json={"messages": MSG}, headers={"X-Request-Id": f"f-{i}"}
            ).status_code
            for i in range(1000)
        ]
    failed = sum(code >= 500 for code in codes)
    assert 150 <= failed <= 250  # binomial(1000, 0.2): ±4.5 sigma


def test_retry_draws_fresh_fault_but_same_body() -> None:
    with running(SimConfig(seed=2, faults=FaultRates(rate_500=0.5))) as url, httpx.Client() as http:
        seen: list[tuple[int, bytes]] = []
        for _ in range(30):
            r = http.post(
                f"{url}/v1/chat/completions", json={"messages": MSG}, headers={"X-Request-Id": "same"}
            )
            seen.append((r.status_code, r.content))
    codes = {code for code, _ in seen}
    assert codes == {200, 500}
    ok = {json.dumps({k: v for k, v in json.loads(b).items() if k != "created"}) for c, b in seen if c == 200}
    assert len(ok) == 1


def test_calls_route_counts_every_attempt_by_request_id(faulty: Faulty) -> None:
    with faulty(rate_500=1.0) as url:
        for rid, times in (("a", 3), ("b", 1)):
            for _ in range(times):
                httpx.post(f"{url}/v1/chat/completions", json={"messages": MSG}, headers={"X-Request-Id": rid})
        assert httpx.get(f"{url}/sim/calls").json() == {"a": 3, "b": 1}
