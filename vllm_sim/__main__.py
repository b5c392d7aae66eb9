"""``python -m vllm_sim``: run the simulator until SIGTERM/SIGINT.

Every option falls back to a ``VLLM_SIM_*`` environment variable. With ``--port 0`` the OS picks a
port; the line ``READY http://host:port`` on stdout tells scripts where it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from aiohttp import web

from llmpipe import aio
from llmpipe.runtime import configure_logging
from vllm_sim.config import DEFAULT_MIX, FaultRates, Latency, SimConfig
from vllm_sim.server import Simulator

log = logging.getLogger("vllm_sim")
_FAULTS = ("429", "500", "503", "400", "hang", "reset", "truncate")


def _env(name: str, default: str) -> str:
    return os.environ.get(f"VLLM_SIM_{name.upper().replace('-', '_')}", default)


def _add(parser: argparse.ArgumentParser, name: str, default: str, kind: type, help_text: str) -> None:
    env = f"VLLM_SIM_{name.upper().replace('-', '_')}"
    parser.add_argument(
        f"--{name}", type=kind, default=kind(_env(name, default)), help=f"{help_text} [env: {env}]"
    )


def parse_mix(text: str) -> dict[str, float]:
    """``prose=3,json=1`` → weights; kinds not named keep weight 0 when any kind is named."""
    if not text:
        return dict(DEFAULT_MIX)
    mix = dict.fromkeys(DEFAULT_MIX, 0.0)
    for part in text.split(","):
        kind, _, weight = part.partition("=")
        if kind.strip() not in mix:
            msg = f"unknown content kind {kind!r}; known: {', '.join(mix)}"
            raise argparse.ArgumentTypeError(msg)
        mix[kind.strip()] = float(weight or 1)
    return mix


def build_parser() -> argparse.ArgumentParser:
    """The command line; defaults come from the environment so containers need no arguments."""
    p = argparse.ArgumentParser(prog="python -m vllm_sim", description=__doc__)
    _add(p, "host", "127.0.0.1", str, "Address to bind.")
    _add(p, "port", "8000", int, "Port to bind (0: any free port).")
    _add(p, "seed", "0", int, "Seed of every random choice.")
    _add(p, "model", "llmpipe/sim-8b", str, "Served model name.")
    _add(p, "ttft-ms", "0", float, "Time to first token.")
    _add(p, "per-token-ms", "0", float, "Time per generated token.")
    _add(p, "jitter", "0", float, "Latency scaled by a uniform factor in [1-j, 1+j].")
    for fault in _FAULTS:
        _add(p, f"rate-{fault}", "0", float, f"Probability of a {fault} fault per attempt.")
    _add(p, "retry-after-s", "1", float, "Retry-After sent with 429.")
    _add(p, "hang-s", "120", float, "How long a hanging request sleeps before answering.")
    _add(p, "mix", "", str, "Content mix without response_format, e.g. 'prose=3,json=2,tool_call=1'.")
    _add(p, "long-scale", "1", int, "Multiplier of the length of 'long' content (300: bodies of 1.5-3 MB).")
    _add(p, "log-level", "WARNING", str, "Logging level.")
    return p


def config_from(args: argparse.Namespace) -> SimConfig:
    """Frozen configuration from parsed options."""
    rates = {f"rate_{f}": getattr(args, f"rate_{f}") for f in _FAULTS}
    faults = FaultRates(**rates, retry_after_s=args.retry_after_s, hang_s=args.hang_s)
    if faults.total() > 1:
        msg = f"fault rates add up to {faults.total()} > 1"
        raise SystemExit(msg)
    latency = Latency(args.ttft_ms, args.per_token_ms, args.jitter)
    return SimConfig(args.seed, args.model, 8192, faults, latency, parse_mix(args.mix), args.long_scale)


async def serve(config: SimConfig, host: str, port: int) -> None:
    """Serve until a termination signal arrives."""
    runner = web.AppRunner(Simulator(config).app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    bound = runner.addresses[0][1]
    print(f"READY http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    log.info("event loop: %s", aio.loop_name())
    aio.run(serve(config_from(args), args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
