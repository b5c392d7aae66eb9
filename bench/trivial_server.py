"""``python -m bench.trivial_server``: answer every POST with one fixed chat.completion body.

The transport table's reference server: it does no per-request work beyond HTTP, so the table shows
what the client costs, as the figures in design §7 were taken. ``READY http://host:port`` on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from aiohttp import web

from llmpipe import aio

BODY = (
    b'{"id":"chatcmpl-0","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"' + b"The order arrived late and support was clear. " * 8 + b'",'
    b'"tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],'
    b'"usage":{"prompt_tokens":9,"total_tokens":81,"completion_tokens":72,"prompt_tokens_details":null}}'
)


async def _answer(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=BODY, content_type="application/json")


async def serve(host: str, port: int) -> None:
    """Serve until SIGTERM/SIGINT."""
    app = web.Application()
    app.router.add_post("/{tail:.*}", _answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    print(f"READY http://{host}:{runner.addresses[0][1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    p = argparse.ArgumentParser(prog="python -m bench.trivial_server", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args(argv)
    aio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
