"""``python -m vllm_sim``: run the simulator until SIGTERM/SIGINT.

Every option falls back to a ``VLLM_SIM_*`` environment variable. With ``--port 0`` the OS picks a
port; the line ``READY http://host:port`` on stdout tells scripts where it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import signal
import sys
from typing import Any

from aiohttp import web

from llmpipe import aio
from llmpipe.errors import ConfigError
from llmpipe.listen import bind_error
from llmpipe.runtime import configure_logging, logging_spec
from llmpipe.settings import (
    Checked,
    env_option,
    integer,
    non_empty,
    non_negative_float,
    parse_args,
    port_or_any,
    positive_int,
    ratio,
)
from vllm_sim.config import DEFAULT_MIX, FaultRates, Latency, SimConfig
from vllm_sim.server import Simulator

log = logging.getLogger("vllm_sim")
_FAULTS = ("429", "500", "503", "400", "hang", "reset", "truncate")
_ROUNDING = 1e-9
"""Fault rates may add up to 1 plus float rounding (0.1 + 0.2 + 0.7)."""


def _add(parser: argparse.ArgumentParser, name: str, default: Any, kind: Any, help_text: str) -> None:
    env_option(parser, f"--{name}", f"VLLM_SIM_{name.upper().replace('-', '_')}", default=default, type=kind,
               help=help_text)  # fmt: skip


def parse_mix(text: str) -> dict[str, float]:
    """``prose=3,json=1`` → weights; kinds not named keep weight 0 when any kind is named.

    ``ValueError`` for an unknown kind, a weight that is not a finite number >= 0, or no weight > 0.
    """
    if not text:
        return dict(DEFAULT_MIX)
    mix = dict.fromkeys(DEFAULT_MIX, 0.0)
    for part in text.split(","):
        kind, _, weight = part.partition("=")
        if kind.strip() not in mix:
            msg = f"unknown content kind {kind!r}; known: {', '.join(mix)}"
            raise ValueError(msg)
        value = float(weight or 1)
        if not math.isfinite(value) or value < 0:
            msg = f"weight of {kind.strip()} is not a finite number >= 0"
            raise ValueError(msg)
        mix[kind.strip()] = value
    if not any(mix.values()):
        msg = "no kind has a weight > 0"
        raise ValueError(msg)
    return mix


content_mix = Checked(
    f"kind=weight,… with kinds among {', '.join(DEFAULT_MIX)} and weights >= 0 (at least one > 0)", parse_mix
)


def build_parser() -> argparse.ArgumentParser:
    """The command line; defaults come from the environment so containers need no arguments."""
    p = argparse.ArgumentParser(prog="python -m vllm_sim", description=__doc__)
    _add(p, "host", "127.0.0.1", non_empty, "Address to bind.")
    _add(p, "port", 8000, port_or_any, "Port to bind (0-65535; 0: any free port).")
    _add(p, "seed", 0, integer, "Seed of every random choice.")
    _add(p, "model", "llmpipe/sim-8b", non_empty, "Served model name.")
    _add(p, "ttft-ms", 0.0, non_negative_float, "Time to first token (>= 0).")
    _add(p, "per-token-ms", 0.0, non_negative_float, "Time per generated token (>= 0).")
    _add(p, "jitter", 0.0, ratio, "Latency scaled by a uniform factor in [1-j, 1+j]; j in [0, 1].")
    for fault in _FAULTS:
        _add(p, f"rate-{fault}", 0.0, ratio, f"Probability of a {fault} fault per attempt (all rates add up to <= 1).")
    _add(p, "retry-after-s", 1.0, non_negative_float, "Retry-After sent with 429 (>= 0).")
    _add(p, "hang-s", 120.0, non_negative_float, "How long a hanging request sleeps before answering (>= 0).")
    _add(p, "mix", "", content_mix, "Content mix without response_format, e.g. 'prose=3,json=2,tool_call=1'.")
    _add(p, "long-scale", 1, positive_int, "Multiplier of the length of 'long' content (300: bodies of 1.5-3 MB).")
    _add(p, "log-level", "WARNING", logging_spec, "Logging level, then any logger=LEVEL.")
    return p


def config_from(args: argparse.Namespace) -> SimConfig:
    """Frozen configuration from parsed options (each value was checked as it was parsed)."""
    rates = {f"rate_{f}": getattr(args, f"rate_{f}") for f in _FAULTS}
    faults = FaultRates(**rates, retry_after_s=args.retry_after_s, hang_s=args.hang_s)
    if faults.total() > 1 + _ROUNDING:
        flags = ", ".join(f"--rate-{f}" for f in _FAULTS)
        msg = f"{flags} must add up to at most 1, not {faults.total():g}"
        raise ConfigError(msg)
    latency = Latency(args.ttft_ms, args.per_token_ms, args.jitter)
    return SimConfig(args.seed, args.model, 8192, faults, latency, args.mix, args.long_scale)


async def serve(config: SimConfig, host: str, port: int) -> None:
    """Serve until a termination signal arrives; :class:`ConfigError` when ``host:port`` cannot be bound."""
    runner = web.AppRunner(Simulator(config).app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise bind_error(exc, host, port, "--port", "--host") from exc
    bound = runner.addresses[0][1]
    print(f"READY http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Entry point: exit 0 after a termination signal, 2 on bad settings or a port it cannot bind (one line)."""
    try:
        args = parse_args(build_parser(), argv)
        config = config_from(args)
        configure_logging(args.log_level)
        log.info("event loop: %s", aio.loop_name())
        aio.run(serve(config, args.host, args.port))
    except ConfigError as exc:
        print(f"vllm_sim: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
