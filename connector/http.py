"""One vLLM call with timeouts and retries, returning a reply or a failure (never raising).

The client is httpx's ``AsyncClient`` over the aiohttp transport (``httpx-aiohttp``): httpx's API,
aiohttp's connection pool, which keeps its throughput at hundreds of requests in flight where
httpcore's pool collapses (figures in ``bench/``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from dataclasses import dataclass

import httpx
from httpx_aiohttp import AiohttpTransport

from connector.metrics import ConnectorMetrics
from connector.retry import RetryPolicy
from connector.stream import Reassembler, StreamErrorEvent, StreamIncomplete
from llmpipe.dlq import Reason
from llmpipe.settings import Secret

log = logging.getLogger(__name__)
_ERROR_BODY_LIMIT = 500


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """Where and how to call."""

    url: str
    api_key: Secret
    timeout_s: float = 60.0
    connect_timeout_s: float = 5.0
    max_connections: int = 256
    stream: bool = False
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    insecure: bool = False
    transport: str = "aiohttp"


@dataclass(frozen=True, slots=True)
class Reply:
    """A 2xx body, byte-exact (or reassembled from a stream), with the call's facts."""

    status: int
    body: bytes
    latency_ms: int
    attempts: int
    received_at_ms: int
    ttft_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Failure:
    """The last attempt's outcome when no reply could be obtained."""

    reason: Reason
    error: str
    attempts: int
    status: int | None = None


def _ssl_context(options: HttpOptions) -> ssl.SSLContext | bool:
    if options.insecure:
        return False
    context = ssl.create_default_context(cafile=options.ca_file)
    if options.client_cert:
        context.load_cert_chain(options.client_cert, options.client_key)
    return context


def make_client(options: HttpOptions) -> httpx.AsyncClient:
    """The shared async client: keep-alive pool sized to the in-flight cap, auth header set once."""
    limits = httpx.Limits(max_connections=options.max_connections, max_keepalive_connections=options.max_connections)
    verify = _ssl_context(options)
    transport: httpx.AsyncBaseTransport
    if options.transport == "aiohttp":
        transport = AiohttpTransport(verify=verify, limits=limits, trust_env=False)
    else:
        transport = httpx.AsyncHTTPTransport(verify=verify, limits=limits, trust_env=False)
    headers = {"Content-Type": "application/json"}
    if options.api_key:
        headers["Authorization"] = f"Bearer {options.api_key.reveal()}"
    timeout = httpx.Timeout(options.timeout_s, connect=options.connect_timeout_s)
    return httpx.AsyncClient(transport=transport, headers=headers, timeout=timeout, trust_env=False)


class Caller:
    """Calls one endpoint with the retry policy; safe to share between tasks."""

    def __init__(
        self, client: httpx.AsyncClient, options: HttpOptions, policy: RetryPolicy, metrics: ConnectorMetrics
    ) -> None:
        self.client = client
        self.options = options
        self.policy = policy
        self.metrics = metrics

    async def _once(self, body: bytes, headers: dict[str, str]) -> tuple[httpx.Response, bytes, int | None]:
        start = time.monotonic()
        if not self.options.stream:
            response = await self.client.post(self.options.url, content=body, headers=headers)
            return response, response.content, None
        async with self.client.stream("POST", self.options.url, content=body, headers=headers) as response:
            if response.status_code >= 300:
                return response, await response.aread(), None
            parts = Reassembler()
            ttft: int | None = None
            async for line in response.aiter_lines():
                if ttft is None and line.startswith("data:"):
                    ttft = int((time.monotonic() - start) * 1000)
                parts.feed(line)
            return response, parts.body(), ttft

    async def call(self, request_id: str, body: bytes) -> Reply | Failure:
        """Up to ``max_attempts`` attempts; 2xx → Reply, other 4xx → HTTP_STATUS, else RETRIES_EXHAUSTED."""
        rng = random.Random(request_id)
        headers = {"X-Request-Id": request_id}
        start = time.monotonic()
        last: Failure | None = None
        for attempt in range(1, self.policy.max_attempts + 1):
            hint: dict[str, str] | None = None
            try:
                async with asyncio.timeout(self.options.timeout_s):
                    response, content, ttft = await self._once(body, headers)
            except (httpx.HTTPError, TimeoutError, StreamIncomplete) as exc:
                self.metrics.http_responses.labels("error").inc()
                last = Failure(Reason.RETRIES_EXHAUSTED, f"{type(exc).__name__}: {exc}", attempt)
                cause = "timeout" if isinstance(exc, TimeoutError | httpx.TimeoutException) else "transport"
            except StreamErrorEvent as exc:
                return Failure(Reason.UPSTREAM_ERROR, str(exc), attempt, 200)
            else:
                status = response.status_code
                self.metrics.http_responses.labels(str(status)).inc()
                if 200 <= status < 300:
                    return self._reply(status, content, attempt, start, ttft)
                text = content[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")
                if not self.policy.should_retry_status(status):
                    return Failure(Reason.HTTP_STATUS, f"HTTP {status}: {text}", attempt, status)
                last = Failure(Reason.RETRIES_EXHAUSTED, f"HTTP {status}: {text}", attempt, status)
                hint, cause = dict(response.headers), str(status)
            if attempt < self.policy.max_attempts:
                self.metrics.retries.labels(cause).inc()
                await asyncio.sleep(self.policy.delay(attempt, hint, rng))
        assert last is not None  # the loop runs at least once
        return last

    def _reply(self, status: int, content: bytes, attempts: int, start: float, ttft: int | None) -> Reply:
        elapsed = time.monotonic() - start
        self.metrics.latency.observe(elapsed)
        return Reply(status, content, int(elapsed * 1000), attempts, int(time.time() * 1000), ttft)
