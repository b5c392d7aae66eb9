"""The demo's options; each falls back to a ``DEMO_*`` environment variable shown in ``--help``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llmpipe.settings import env_option, parse_args

JOBS = ("model_minute",)


@dataclass(frozen=True)
class DemoSettings:
    """Where the demo runs, what it sends, and what it talks to."""

    run_dir: Path
    requests: int
    vllm_url: str | None
    bootstrap: str | None
    backend: str
    timeout_s: float
    seed: int


def parser() -> argparse.ArgumentParser:
    """``python -m demo`` options."""
    p = argparse.ArgumentParser(prog="python -m demo", description=__doc__.splitlines()[0] if __doc__ else None)
    env_option(p, "--dir", "DEMO_DIR", default=".demo", help="run folder: broker data, logs, prompts, summary")
    env_option(p, "--requests", "DEMO_REQUESTS", default=6000, type=int, help="prompts to send (>= 5000)")
    env_option(p, "--vllm-url", "DEMO_VLLM_URL",
               help="a real vLLM chat completions URL; without it the simulator is started")
    env_option(p, "--bootstrap", "DEMO_BOOTSTRAP",
               help="an existing Kafka; without it a fresh local broker is started in --dir")
    env_option(p, "--backend", "DEMO_BACKEND", default="auto", choices=["auto", "gpu", "cpu", "reference"],
               help="gpu_stage backend")
    env_option(p, "--timeout-s", "DEMO_TIMEOUT_S", default=900.0, type=float, help="give up after this long")
    env_option(p, "--seed", "DEMO_SEED", default=7, type=int, help="prompt set and simulator seed")
    return p


def load(argv: Sequence[str] | None = None) -> DemoSettings:
    """Parse options into the frozen settings."""
    args = parse_args(parser(), argv)
    return DemoSettings(Path(args.dir).resolve(), args.requests, args.vllm_url, args.bootstrap, args.backend,
                        args.timeout_s, args.seed)
