"""One vLLM call with timeouts and retries, returning a reply or a failure (never raising).

The caller speaks the small part of httpx's ``AsyncClient`` API in :class:`HttpClient`. Three clients
provide it (``--transport``): ``direct`` (default), an aiohttp session behind that API; ``aiohttp``,
httpx over the aiohttp transport (``httpx-aiohttp``); ``httpx``, httpx with its own httpcore pool,
which collapses at hundreds of requests in flight. ``direct`` costs the least CPU per request: on
the 2-core benchmark machine httpx's layers above the aiohttp transport took more CPU than aiohttp
itself (figures in ``bench/results/``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

import httpx
from prometheus_client import Counter

from connector.direct import DirectClient
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
    transport: str = "direct"


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


class Answer(Protocol):
    """What the caller reads from a reply (httpx's ``Response`` has it, and so does the direct client's)."""

    @property
    def status_code(self) -> int:
        """HTTP status."""
        ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Response headers (case-insensitive lookup not required: the retry policy lowers them)."""
        ...


class FullAnswer(Answer, Protocol):
    """A reply read to its end."""

    @property
    def content(self) -> bytes:
        """The whole body, byte-exact."""
        ...


class StreamAnswer(Answer, Protocol):
    """A reply whose body is still arriving."""

    async def aread(self) -> bytes:
        """The rest of the body."""
        ...

    def aiter_lines(self) -> AsyncIterator[str]:
        """Body lines without their endings."""
        ...


class HttpClient(Protocol):
    """The part of ``httpx.AsyncClient`` the caller uses; transport faults raise ``httpx.HTTPError``."""

    async def post(self, url: str, *, content: bytes, headers: dict[str, str]) -> FullAnswer:
        """Send a body and read the whole reply."""
        ...

    def stream(
        self, method: str, url: str, *, content: bytes, headers: dict[str, str]
    ) -> AbstractAsyncContextManager[StreamAnswer]:
        """Send a body; the reply is read inside the block."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None: ...


def make_client(options: HttpOptions) -> HttpClient:
    """The shared async client: keep-alive pool sized to the in-flight cap, auth header set once."""
    # Loading the CA bundle takes a noticeable part of start-up; a plain-http endpoint needs none.
    verify = _ssl_context(options) if options.url.startswith("https:") else False
    headers = {"Content-Type": "application/json"}
    if options.api_key:
        headers["Authorization"] = f"Bearer {options.api_key.reveal()}"
    if options.transport == "direct":
        return DirectClient(
            verify=verify,
            max_connections=options.max_connections,
            headers=headers,
            connect_timeout_s=options.connect_timeout_s,
        )
    limits = httpx.Limits(max_connections=options.max_connections, max_keepalive_connections=options.max_connections)
    transport: httpx.AsyncBaseTransport
    if options.transport == "aiohttp":
        from httpx_aiohttp import AiohttpTransport  # imported only when chosen: it is slow to import

        transport = AiohttpTransport(verify=verify, limits=limits, trust_env=False)
    else:
        transport = httpx.AsyncHTTPTransport(verify=verify, limits=limits, trust_env=False)
    timeout = httpx.Timeout(options.timeout_s, connect=options.connect_timeout_s)
    return httpx.AsyncClient(transport=transport, headers=headers, timeout=timeout, trust_env=False)


class Caller:
    """Calls one endpoint with the retry policy; safe to share between tasks."""

    def __init__(
        self, client: HttpClient, options: HttpOptions, policy: RetryPolicy, metrics: ConnectorMetrics
    ) -> None:
        self.client = client
        self.options = options
        self.policy = policy
        self.metrics = metrics
        self._responses: dict[str, Counter] = {}  # status label → child, looked up once per status

    def _count_response(self, label: str) -> None:
        child = self._responses.get(label)
        if child is None:
            child = self._responses[label] = self.metrics.http_responses.labels(label)
        child.inc()

    async def _once(self, body: bytes, headers: dict[str, str]) -> tuple[Answer, bytes, int | None]:
        start = time.monotonic()
        if not self.options.stream:
            full = await self.client.post(self.options.url, content=body, headers=headers)
            return full, full.content, None
        async with self.client.stream("POST", self.options.url, content=body, headers=headers) as streamed:
            if streamed.status_code >= 300:
                return streamed, await streamed.aread(), None
            parts = Reassembler()
            ttft: int | None = None
            async for line in streamed.aiter_lines():
                if ttft is None and line.startswith("data:"):
                    ttft = int((time.monotonic() - start) * 1000)
                parts.feed(line)
            return streamed, parts.body(), ttft

    async def call(self, request_id: str, body: bytes) -> Reply | Failure:
        """Up to ``max_attempts`` attempts; 2xx → Reply, other 4xx → HTTP_STATUS, else RETRIES_EXHAUSTED."""
        rng: random.Random | None = None  # seeded only when a retry needs jitter: seeding hashes the id
        headers = {"X-Request-Id": request_id}
        start = time.monotonic()
        last: Failure | None = None
        for attempt in range(1, self.policy.max_attempts + 1):
            hint: dict[str, str] | None = None
            try:
                async with asyncio.timeout(self.options.timeout_s):
                    response, content, ttft = await self._once(body, headers)
            except (httpx.HTTPError, TimeoutError, StreamIncomplete) as exc:
                self._count_response("error")
                last = Failure(Reason.RETRIES_EXHAUSTED, f"{type(exc).__name__}: {exc}", attempt)
                cause = "timeout" if isinstance(exc, TimeoutError | httpx.TimeoutException) else "transport"
            except StreamErrorEvent as exc:
                return Failure(Reason.UPSTREAM_ERROR, str(exc), attempt, 200)
            else:
                status = response.status_code
                self._count_response(str(status))
                if 200 <= status < 300:
                    return self._reply(status, content, attempt, start, ttft)
                text = content[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")
                if not self.policy.should_retry_status(status):
                    return Failure(Reason.HTTP_STATUS, f"HTTP {status}: {text}", attempt, status)
                last = Failure(Reason.RETRIES_EXHAUSTED, f"HTTP {status}: {text}", attempt, status)
                hint, cause = dict(response.headers), str(status)
            if attempt < self.policy.max_attempts:
                self.metrics.retries.labels(cause).inc()
                rng = rng or random.Random(request_id)
                await asyncio.sleep(self.policy.delay(attempt, hint, rng))
        assert last is not None  # the loop runs at least once
        return last

    def _reply(self, status: int, content: bytes, attempts: int, start: float, ttft: int | None) -> Reply:
        elapsed = time.monotonic() - start
        self.metrics.latency.observe(elapsed)
        return Reply(status, content, int(elapsed * 1000), attempts, int(time.time() * 1000), ttft)
