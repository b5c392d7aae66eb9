"""Streaming capture reassembles to the unary body: same bytes except `created` for the same seed."""

from __future__ import annotations

import asyncio
import json

import pytest

from connector.http import Caller, HttpOptions, Reply, make_client
from connector.metrics import ConnectorMetrics
from connector.retry import RetryPolicy
from connector.stream import Reassembler, StreamIncomplete
from llmpipe.settings import Secret
from vllm_sim.config import SimConfig
from vllm_sim.testing import running


async def _fetch(url: str, stream: bool, ids: list[str], body: dict[str, object]) -> list[Reply]:
    opts = HttpOptions(url=f"{url}/v1/chat/completions", api_key=Secret("k"), stream=stream)
    async with make_client(opts) as client:
        caller = Caller(client, opts, RetryPolicy(max_attempts=1), ConnectorMetrics())
        out = []
        for rid in ids:
            payload = {**body, "stream": True, "stream_options": {"include_usage": True}} if stream else body
            reply = await caller.call(rid, json.dumps(payload).encode())
            assert isinstance(reply, Reply)
            out.append(reply)
        return out


@pytest.mark.parametrize("n", [1, 3])
def test_stream_equals_unary(n: int) -> None:
    ids = [f"r-{i}" for i in range(80)]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": n}
    with running(SimConfig(seed=11)) as url:
        unary = asyncio.run(_fetch(url, False, ids, body))
        streamed = asyncio.run(_fetch(url, True, ids, body))
    for u, s in zip(unary, streamed, strict=True):
        a, b = json.loads(u.body), json.loads(s.body)
        a.pop("created"), b.pop("created")
        assert a == b
        assert list(json.loads(u.body)) == list(json.loads(s.body))
        assert s.ttft_ms is not None and u.ttft_ms is None


def test_truncated_stream_is_incomplete() -> None:
    parts = Reassembler()
    parts.feed('data: {"id":"x","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}')
    with pytest.raises(StreamIncomplete):
        parts.body()
