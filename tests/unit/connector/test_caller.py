"""The HTTP caller against the simulator over loopback: retry policy as observed on the wire."""

from __future__ import annotations

import asyncio
import time

import httpx

from connector.http import Caller, Failure, HttpOptions, Reply, make_client
from connector.metrics import ConnectorMetrics
from connector.retry import RetryPolicy
from llmpipe.dlq import Reason
from llmpipe.settings import Secret
from vllm_sim.config import FaultRates, SimConfig
from vllm_sim.testing import running

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


def _call(url: str, policy: RetryPolicy, timeout_s: float = 5.0) -> tuple[Reply | Failure, float]:
    async def go() -> Reply | Failure:
        opts = HttpOptions(url=f"{url}/v1/chat/completions", api_key=Secret("k"), timeout_s=timeout_s)
        async with make_client(opts) as client:
            return await Caller(client, opts, policy, ConnectorMetrics()).call("rid-1", BODY)

    start = time.monotonic()
    result = asyncio.run(go())
    return result, time.monotonic() - start


def _attempts_seen(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm_sim_requests_total"))


def test_400_is_not_retried() -> None:
    with running(SimConfig(faults=FaultRates(rate_400=1.0))) as url:
        result, _ = _call(url, RetryPolicy(max_attempts=4, base_s=0.01))
        assert isinstance(result, Failure)
        assert (result.reason, result.status, result.attempts) == (Reason.HTTP_STATUS, 400, 1)
        assert _attempts_seen(url) == 1


def test_retry_after_is_obeyed() -> None:
    faults = FaultRates(rate_429=1.0, retry_after_s=0.4)
    with running(SimConfig(faults=faults)) as url:
        result, elapsed = _call(url, RetryPolicy(max_attempts=3, base_s=0.01))
        assert isinstance(result, Failure)
        assert (result.reason, result.status, result.attempts) == (Reason.RETRIES_EXHAUSTED, 429, 3)
        assert elapsed >= 0.8  # two waits of Retry-After 0.4 s, not the 10 ms backoff
        assert _attempts_seen(url) == 3


def test_connection_faults_exhaust_retries() -> None:
    for rates in (FaultRates(rate_reset=1.0), FaultRates(rate_truncate=1.0), FaultRates(rate_hang=1.0, hang_s=3)):
        with running(SimConfig(faults=rates)) as url:
            result, _ = _call(url, RetryPolicy(max_attempts=2, base_s=0.01), timeout_s=0.3)
            assert isinstance(result, Failure)
            assert (result.reason, result.attempts) == (Reason.RETRIES_EXHAUSTED, 2)


def test_transient_faults_recover() -> None:
    with running(SimConfig(seed=5, faults=FaultRates(rate_500=0.3, rate_503=0.3))) as url:

        async def go() -> list[Reply | Failure]:
            opts = HttpOptions(url=f"{url}/v1/chat/completions", api_key=Secret("k"))
            async with make_client(opts) as client:
                caller = Caller(client, opts, RetryPolicy(max_attempts=8, base_s=0.001), ConnectorMetrics())
                return list(await asyncio.gather(*(caller.call(f"r{i}", BODY) for i in range(100))))

        results = asyncio.run(go())
    assert all(isinstance(r, Reply) and r.status == 200 for r in results)
    assert any(isinstance(r, Reply) and r.attempts > 1 for r in results)
