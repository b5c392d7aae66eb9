"""The aiohttp application: routes, fault injection and the latency model."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from collections import defaultdict
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from vllm_sim import bodies, content
from vllm_sim.config import SimConfig
from vllm_sim.faults import Fault, draw
from vllm_sim.metrics import SimMetrics
from vllm_sim.rng import hex_id, request_key, rng_for

log = logging.getLogger(__name__)
JSON = "application/json"
_REQUEST_ID_HEADER = "X-Request-Id"


class Simulator:
    """Holds the configuration and per-key attempt counters; its methods are the route handlers.

    The attempt counter exists so that a retried request draws a fresh fault (else a request that
    failed once would fail forever) while its body stays the same on every attempt.
    """

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.metrics = SimMetrics()
        self.attempts: defaultdict[str, int] = defaultdict(int)

    def app(self) -> web.Application:
        """Build the aiohttp application with every route."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/sim/calls", self.calls)
        return app

    def _error(self, route: str, status: int, message: str, **headers: str) -> web.Response:
        self.metrics.requests.labels(route, str(status)).inc()
        return web.Response(
            body=bodies.error_body(status, message), status=status, content_type=JSON, headers=headers
        )

    async def _payload(self, request: web.Request) -> dict[str, Any] | str:
        """The JSON object of the request, or the error text vLLM would send with a 400."""
        raw = await request.read()
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return f"Invalid JSON body: {exc}"
        return payload if isinstance(payload, dict) else "Request body must be a JSON object"

    async def _inject(
        self, route: str, request: web.Request, fault: Fault, ok_body: bytes
    ) -> web.StreamResponse:
        """Answer with the drawn fault instead of (or with a broken copy of) the real body."""
        self.metrics.faults.labels(fault.value).inc()
        faults = self.config.faults
        if fault is Fault.TOO_MANY:
            retry_after = f"{faults.retry_after_s:g}"
            return self._error(route, 429, "Too many requests, retry later", **{"Retry-After": retry_after})
        if fault is Fault.SERVER_ERROR:
            return self._error(
                route, 500, "EngineCore encountered an issue. See stack trace for the root cause."
            )
        if fault is Fault.UNAVAILABLE:
            return self._error(route, 503, "The server is overloaded, please retry")
        if fault is Fault.BAD_REQUEST:
            return self._error(route, 400, _CONTEXT_MESSAGE)
        if fault is Fault.HANG:
            await asyncio.sleep(faults.hang_s)
            return web.Response(body=ok_body, content_type=JSON)
        if fault is Fault.RESET:
            _reset(request)
            return web.Response(status=500)
        return await _truncated(request, ok_body)

    def _draw_fault(self, key: str) -> Fault:
        self.attempts[key] += 1
        if self.config.faults.total() <= 0:
            return Fault.NONE
        return draw(rng_for(self.config.seed, key, f"fault/{self.attempts[key]}"), self.config.faults)

    async def _delay(self, completion: content.Completion, key: str) -> None:
        """TTFT plus per-token time for the longest choice, scaled by the configured jitter."""
        lat = self.config.latency
        longest = max((c.token_count() for c in completion.choices), default=0)
        total_ms = lat.ttft_ms + lat.per_token_ms * longest
        if lat.jitter > 0:
            total_ms *= 1 + lat.jitter * (2 * rng_for(self.config.seed, key, "latency").random() - 1)
        if total_ms > 0:
            await asyncio.sleep(total_ms / 1000)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``, unary or SSE."""
        route = "chat"
        payload = await self._payload(request)
        if isinstance(payload, str):
            return self._error(route, 400, payload)
        if not isinstance(payload.get("messages"), list) or not payload["messages"]:
            return self._error(route, 400, "messages: field required and must be a non-empty list")
        key = request_key(request.headers.get(_REQUEST_ID_HEADER), payload)
        fault = self._draw_fault(key)
        completion = content.plan(
            payload,
            rng_for(self.config.seed, key, "body"),
            self.config.model,
            self.config.mix,
            int(time.time()),
            self.config.long_scale,
        )
        self.metrics.running.inc()
        try:
            if fault is not Fault.NONE:
                return await self._inject(route, request, fault, bodies.chat_body(completion))
            await self._delay(completion, key)
            self._count_tokens(completion)
            if payload.get("stream") is True:
                return await self._stream(request, completion, payload)
            self.metrics.requests.labels(route, "200").inc()
            return web.Response(body=bodies.chat_body(completion), content_type=JSON)
        finally:
            self.metrics.running.dec()

    def _count_tokens(self, completion: content.Completion) -> None:
        self.metrics.prompt_tokens.inc(completion.prompt_tokens)
        self.metrics.generation_tokens.inc(completion.completion_tokens)

    async def _stream(
        self, request: web.Request, completion: content.Completion, payload: dict[str, Any]
    ) -> web.StreamResponse:
        """SSE: one ``data:`` event per chunk, then ``data: [DONE]``; per-token pacing if configured."""
        options = payload.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        pace = self.config.latency.per_token_ms / 1000
        frames = [b"data: " + chunk + b"\n\n" for chunk in bodies.stream_chunks(completion, include_usage)]
        frames.append(b"data: [DONE]\n\n")
        if pace > 0:
            for frame in frames:
                await response.write(frame)
                await asyncio.sleep(pace)
        else:
            await response.write(b"".join(frames))
        await response.write_eof()
        self.metrics.requests.labels("chat_stream", "200").inc()
        return response

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/completions`` (unary only)."""
        route = "completions"
        payload = await self._payload(request)
        if isinstance(payload, str):
            return self._error(route, 400, payload)
        if "prompt" not in payload:
            return self._error(route, 400, "prompt: field required")
        key = request_key(request.headers.get(_REQUEST_ID_HEADER), payload)
        fault = self._draw_fault(key)
        rng = rng_for(self.config.seed, key, "body")
        max_tokens = payload.get("max_tokens") if isinstance(payload.get("max_tokens"), int) else None
        n = payload.get("n") if isinstance(payload.get("n"), int) else 1
        choices = [content.completion_text(rng, max_tokens) for _ in range(max(1, min(int(n or 1), 16)))]
        name = payload.get("model") if isinstance(payload.get("model"), str) else self.config.model
        body = bodies.text_completion_body(
            hex_id(rng), int(time.time()), str(name), choices, content.prompt_tokens(payload)
        )
        if fault is not Fault.NONE:
            return await self._inject(route, request, fault, body)
        self.metrics.requests.labels(route, "200").inc()
        return web.Response(body=body, content_type=JSON)

    async def models(self, _request: web.Request) -> web.Response:
        """``GET /v1/models``."""
        body = bodies.models_body(self.config.model, int(time.time()), self.config.max_model_len)
        return web.Response(body=body, content_type=JSON)

    async def health(self, _request: web.Request) -> web.Response:
        """``GET /health``: 200 with an empty body, as vLLM answers."""
        return web.Response(status=200)

    async def calls(self, _request: web.Request) -> web.Response:
        """``GET /sim/calls``: calls received per request key (X-Request-Id), for exactly-once checks.

        Not a vLLM route: it lets a test tell which requests a client called again after a crash.
        """
        return web.Response(body=orjson.dumps(dict(self.attempts)), content_type=JSON)

    async def prometheus(self, _request: web.Request) -> web.Response:
        """``GET /metrics`` in the Prometheus text format."""
        return web.Response(
            body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )


_CONTEXT_MESSAGE = (
    "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens "
    "(8000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."
)


def _reset(request: web.Request) -> None:
    """Drop the connection with a TCP RST (SO_LINGER 0), as a crashed proxy would."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _truncated(request: web.Request, body: bytes) -> web.StreamResponse:
    """Promise the full Content-Length, send half of the body, then drop the connection."""
    response = web.StreamResponse(headers={"Content-Type": JSON})
    response.content_length = len(body)
    await response.prepare(request)
    await response.write(body[: len(body) // 2])
    _reset(request)
    return response
