"""``python -m bench.connector_bench``: connector completions/s and the HTTP transport comparison.

Runs the simulator as its own process on loopback, a local broker from the stack (or
``KAFKA_BOOTSTRAP``), and the connector as a subprocess over a JSONL file; prints figures and writes
JSON to ``bench/results/``. Not a test: the numbers depend on the machine, which is recorded, and on
whatever else runs on it, so the load average is recorded before every scenario.

``--baseline-ref REF`` checks REF out into a temporary git worktree and runs its simulator and
connector for each scenario too, alternating with the working tree, so before/after figures come
from the same run under the same neighbours.

What a connector figure measures: ``rate_per_s`` is committed completions divided by the time from
the connector's first HTTP call to its last committed transaction (``work_s``, from the connector's
``connector done`` line). It counts the ramp-up of the first calls (opening every connection) and
the final commit, but not process start, imports, or the Kafka start-up before the first call
(``startup_s``: producer ``init_transactions`` and the input position), which is a fixed cost per
process, not throughput. ``engine_rate_per_s`` (engine built to last commit) and
``rate_incl_startup_per_s`` (whole process, wall clock) include that start-up. Both scenarios run
``--requests`` requests (20,000 by default: about 16 s at 256 in flight and 200 ms, so one wave of
ramp-up or tail is about 1 % of the run). A connector without the work fields (an older
``--baseline-ref``) falls back to its engine rate, marked by ``measured_over``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from connector.direct import DirectClient
from llmpipe import aio
from llmpipe.kafka_io import KafkaSettings

ROOT = Path(__file__).resolve().parents[1]
BODY = b'{"model":"m","messages":[{"role":"user","content":"benchmark"}]}'


@contextmanager
def server(module: str, *args: str, tree: Path = ROOT) -> Iterator[tuple[str, int]]:
    """A ``READY``-printing server module of ``tree`` on a free loopback port; yields (base URL, pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--port", "0", *args], cwd=tree, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    try:
        yield line[1], proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def simulator(*args: str, tree: Path = ROOT) -> AbstractContextManager[tuple[str, int]]:
    """Simulator subprocess of ``tree``."""
    return server("vllm_sim", *args, tree=tree)


@contextmanager
def worktree(ref: str) -> Iterator[Path]:
    """``ref`` checked out in a temporary git worktree (removed afterwards)."""
    path = Path(tempfile.mkdtemp(prefix="bench-baseline-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=ROOT, check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False, capture_output=True)


def loadavg() -> list[float]:
    """1, 5 and 15 minute load averages (the machine is shared)."""
    return [round(x, 2) for x in os.getloadavg()]


@contextmanager
def broker() -> Iterator[KafkaSettings]:
    """A broker from the local stack in a temp folder, or KAFKA_BOOTSTRAP when set."""
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield KafkaSettings(bootstrap=external)
        return
    from stack import broker as local

    root = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    run = local.start(root)
    try:
        yield KafkaSettings(bootstrap=run.bootstrap())
    finally:
        local.stop(root)


async def _drive(call: Callable[[int], Awaitable[None]], total: int, depth: int) -> float:
    counter = iter(range(total))

    async def worker() -> None:
        for i in counter:
            await call(i)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(depth)))
    return total / (time.perf_counter() - start)


async def httpx_rate(url: str, total: int, depth: int, aiohttp_transport: bool) -> float:
    """Requests/s of httpx with its own pool (httpcore) or the aiohttp transport."""
    limits = httpx.Limits(max_connections=depth, max_keepalive_connections=depth)
    transport = AiohttpTransport(limits=limits) if aiohttp_transport else httpx.AsyncHTTPTransport(limits=limits)
    async with httpx.AsyncClient(transport=transport, timeout=60) as client:

        async def call(i: int) -> None:
            r = await client.post(url, content=BODY, headers={"X-Request-Id": f"b{i}"})
            assert r.status_code == 200

        await call(-1)
        return await _drive(call, total, depth)


async def direct_rate(url: str, total: int, depth: int) -> float:
    """Requests/s of the connector's direct client (aiohttp session behind httpx's call shape)."""
    async with DirectClient(verify=False, max_connections=depth, headers={}, connect_timeout_s=5) as client:

        async def call(i: int) -> None:
            r = await client.post(url, content=BODY, headers={"X-Request-Id": f"b{i}"})
            assert r.status_code == 200

        await call(-1)
        return await _drive(call, total, depth)


async def aiohttp_rate(url: str, total: int, depth: int) -> float:
    """Requests/s of plain aiohttp, the ceiling for any aiohttp-based client."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=depth)) as session:

        async def call(i: int) -> None:
            async with session.post(url, data=BODY, headers={"X-Request-Id": f"b{i}"}) as r:
                await r.read()
                assert r.status == 200

        await call(-1)
        return await _drive(call, total, depth)


def transports(total: int) -> dict[str, object]:
    """The transport table: depth 1, 64 and 256, against a trivial server and a zero-latency simulator.

    The clients run on the loop the connector uses (:mod:`llmpipe.aio`); both servers are on it too.
    """
    out: dict[str, object] = {"client_loop": aio.loop_name()}
    for name, module in (("trivial_server", "bench.trivial_server"), ("simulator", "vllm_sim")):
        table: dict[str, dict[str, float]] = {}
        with server(module) as (base, _pid):
            url = f"{base}/v1/chat/completions"
            for depth in (1, 64, 256):
                n = total // 3 if depth == 1 else total
                row = {
                    "load_1m": loadavg()[0],
                    "httpx": aio.run(httpx_rate(url, n, depth, False)),
                    "httpx+aiohttp": aio.run(httpx_rate(url, n, depth, True)),
                    "direct": aio.run(direct_rate(url, n, depth)),
                    "aiohttp": aio.run(aiohttp_rate(url, n, depth)),
                }
                table[str(depth)] = row
                cells = "  ".join(f"{k}={v:,.0f}/s" for k, v in row.items() if k != "load_1m")
                print(f"transport {name} depth={depth:>3}: {cells}  (load {row['load_1m']})", flush=True)
        out[name] = table
    return out


def connector_rate(
    kafka: KafkaSettings, total: int, in_flight: int, sim_args: list[str], tree: Path = ROOT
) -> dict[str, Any]:
    """Completions/s of the connector subprocess of ``tree`` over a JSONL file of ``total`` requests."""
    load = loadavg()
    with tempfile.TemporaryDirectory() as tmp, simulator(*sim_args, tree=tree) as (base, _pid):
        path = Path(tmp) / "requests.jsonl"
        tag = uuid.uuid4().hex[:8]
        with path.open("w") as fh:
            for i in range(total):
                fh.write(json.dumps({"request_id": f"{tag}-{i}", "messages": [{"role": "user", "content": "q"}]}))
                fh.write("\n")
        cmd = [
            sys.executable,
            "-m",
            "connector",
            "--bootstrap",
            kafka.bootstrap,
            "--input-file",
            str(path),
            "--url",
            f"{base}/v1/chat/completions",
            "--raw-topic",
            f"bench.raw.{tag}",
            "--dlq-topic",
            f"bench.dlq.{tag}",
            "--state-topic",
            f"bench.state.{tag}",
            "--transactional-id",
            f"bench-{tag}",
            "--max-in-flight",
            str(in_flight),
            "--log-level",
            "INFO",
        ]
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=600, check=True)
        wall = time.perf_counter() - start
    match = re.search(r"committed=(\d+) dlq=(\d+) elapsed_s=([\d.]+) rate=(\d+)", done.stderr)
    assert match, done.stderr[-2000:]
    committed, elapsed = int(match.group(1)), float(match.group(3))
    work = re.search(r"startup_s=([\d.]+) work_s=([\d.]+)", done.stderr)
    figures: dict[str, Any] = {"measured_over": "engine", "rate_per_s": committed / elapsed}
    if work:
        startup, span = float(work.group(1)), float(work.group(2))
        figures = {
            "measured_over": "first call to last commit",
            "rate_per_s": committed / span,
            "work_s": span,
            "startup_s": startup,
        }
    return {
        "requests": total,
        "committed": committed,
        **figures,
        "engine_s": elapsed,
        "engine_rate_per_s": committed / elapsed,
        "process_wall_s": wall,
        "rate_incl_startup_per_s": committed / wall,
        "loadavg_before": load,
    }


def _figures(run: dict[str, Any]) -> str:
    engine = f"engine {run['engine_rate_per_s']:,.0f}/s over {run['engine_s']:.2f} s"
    over = f"over {run['work_s']:.2f} s after {run['startup_s']:.2f} s start-up; " if "work_s" in run else ""
    return (
        f"{run['rate_per_s']:,.0f} completions/s ({run['committed']} {over}{engine}; "
        f"{run['rate_incl_startup_per_s']:,.0f}/s whole process; load {run['loadavg_before'][0]})"
    )


def scenarios(kafka: KafkaSettings, requests: int, tree: Path, label: str) -> dict[str, dict[str, Any]]:
    """Zero latency, then 200 ms latency with 256 in flight, for the code in ``tree``."""
    zero = connector_rate(kafka, requests, 256, [], tree)
    print(f"[{label}] connector, zero latency, 256 in flight: {_figures(zero)}", flush=True)
    slow = connector_rate(kafka, requests, 256, ["--ttft-ms", "200"], tree)
    ideal = 256 / 0.2
    print(
        f"[{label}] connector, 200 ms latency, 256 in flight: {slow['rate_per_s'] / ideal:.1%} of {ideal:,.0f}/s; "
        f"{_figures(slow)}",
        flush=True,
    )
    return {
        "connector_zero_latency": zero,
        "connector_200ms_256_in_flight": {**slow, "ideal_per_s": ideal, "fraction": slow["rate_per_s"] / ideal},
    }


def main(argv: list[str] | None = None) -> int:
    """Run every scenario, print the figures, write the JSON."""
    p = argparse.ArgumentParser(prog="python -m bench.connector_bench", description=__doc__)
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--transport-requests", type=int, default=6000)
    p.add_argument("--skip-transports", action="store_true")
    p.add_argument("--baseline-ref", help="git ref whose simulator and connector also run, for before/after")
    p.add_argument("--rounds", type=int, default=1, help="alternations of baseline and current")
    args = p.parse_args(argv)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    result: dict[str, object] = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "loadavg_at_start": loadavg(),
            "event_loop": aio.loop_name(),
        },
        "commit": head.stdout.strip(),
    }
    if not args.skip_transports:
        result["transports_req_per_s"] = transports(args.transport_requests)
    with broker() as kafka, ExitStack() as stack:
        base_tree = stack.enter_context(worktree(args.baseline_ref)) if args.baseline_ref else None
        current: list[dict[str, dict[str, Any]]] = []
        baseline: list[dict[str, dict[str, Any]]] = []
        for _ in range(args.rounds):
            if base_tree is not None:
                baseline.append(scenarios(kafka, args.requests, base_tree, f"baseline {args.baseline_ref}"))
            current.append(scenarios(kafka, args.requests, ROOT, "current"))
        result.update(current[-1])
        if args.rounds > 1:
            result["current_rounds"] = current
        if base_tree is not None:
            result["baseline"] = {"ref": args.baseline_ref, "rounds": baseline}
    out = ROOT / "bench" / "results" / f"connector-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
