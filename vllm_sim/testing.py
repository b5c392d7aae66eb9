"""Run a simulator inside the current process on a background thread (for tests and benchmarks)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from vllm_sim.config import SimConfig
from vllm_sim.server import Simulator


@contextmanager
def running(config: SimConfig, host: str = "127.0.0.1") -> Iterator[str]:
    """Yield the base URL (``http://host:port``) of a simulator that stops when the block exits."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(Simulator(config).app(), access_log=None)
    ready = threading.Event()
    url: list[str] = []

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, host, 0)
        await site.start()
        url.append(f"http://{host}:{runner.addresses[0][1]}")
        ready.set()

    thread = threading.Thread(target=loop.run_forever, name="vllm-sim", daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    ready.wait(10)
    try:
        yield url[0]
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
