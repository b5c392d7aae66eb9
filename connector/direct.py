"""The part of httpx's ``AsyncClient`` API the caller uses, served straight by an aiohttp session.

Profiling the connector against a trivial server showed most of its per-request CPU in httpx's own
layers above the aiohttp transport (request building, URL merging, header normalisation, cookie
extraction, response stream wrappers), not in aiohttp. This client keeps the caller's code and its
exception contract (``httpx.HTTPError`` for transport faults) and drops those layers; figures in
``bench/results/``.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import aiohttp
import httpx
from multidict import CIMultiDictProxy

_READ_BUFFER = 1 << 20  # SSE lines longer than aiohttp's default 64 KiB buffer must not fail


@dataclass(frozen=True, slots=True)
class DirectResponse:
    """A finished response: status, headers and the whole body."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes


class DirectStream:
    """A response whose body is still arriving (streaming capture)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        self.headers: CIMultiDictProxy[str] = response.headers

    async def aread(self) -> bytes:
        """The rest of the body."""
        try:
            return await self._response.read()
        except aiohttp.ClientError as exc:
            raise _translate(exc) from exc

    async def aiter_lines(self) -> AsyncIterator[str]:
        """Lines without their line ending, like httpx's ``aiter_lines``."""
        try:
            async for raw in self._response.content:
                yield raw.decode("utf-8", "replace").rstrip("\r\n")
        except aiohttp.ClientError as exc:
            raise _translate(exc) from exc


def _translate(exc: aiohttp.ClientError) -> httpx.TransportError:
    """The httpx exception the caller already classifies (all are ``httpx.HTTPError``)."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(text)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(text)
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError(text)
    return httpx.ReadError(text)


class DirectClient:
    """A keep-alive aiohttp session with default headers; ``post`` and ``stream`` as in httpx."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool,
        max_connections: int,
        headers: Mapping[str, str],
        connect_timeout_s: float,
    ) -> None:
        self._verify = verify
        self._max_connections = max_connections
        self._headers = dict(headers)
        self._connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Created lazily: aiohttp binds the session to the running loop.
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, ssl=self._verify, ttl_dns_cache=300
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s),
                cookie_jar=aiohttp.DummyCookieJar(),
                read_bufsize=_READ_BUFFER,
                trust_env=False,
            )
        return self._session

    async def post(self, url: str, *, content: bytes, headers: Mapping[str, str]) -> DirectResponse:
        """Send ``content`` and read the whole reply."""
        try:
            async with self._open().post(url, data=content, headers=headers) as response:
                body = await response.read()
                return DirectResponse(response.status, response.headers, body)
        except aiohttp.ClientError as exc:
            raise _translate(exc) from exc

    @asynccontextmanager
    async def stream(
        self, method: str, url: str, *, content: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[DirectStream]:
        """Send ``content``; the reply's body is read by the caller inside the block."""
        try:
            async with self._open().request(method, url, data=content, headers=headers) as response:
                yield DirectStream(response)
        except aiohttp.ClientError as exc:
            raise _translate(exc) from exc

    async def aclose(self) -> None:
        """Close the pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()
