"""``python -m bench``: gpu_stage's backends against the peers on one corpus, in one process run.

Order matters: the peers' worker processes are forked before any GPU context exists, then the Flink
peer (``--with-flink``), then the backends' main run (with the value checksum) and the batch-size
sweep. Ratios in the table come from this one run, so they hold even on a noisy shared machine.
See ``docs/performance.md`` for the commands behind the current figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
from pathlib import Path
from typing import Any

from bench import backends, corpora, machine, peers
from bench.checksum import Checksum
from bench.transform import add_lane_knobs, lane_knobs, set_lane_knobs
from gpu_stage.runtime import tune_process, usable_cores
from gpu_stage.transform.device.kernels import lane_outline

RESULTS = Path(__file__).resolve().parent / "results"


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _default_lane_order() -> str:
    from gpu_stage.transform import TransformSettings

    return TransformSettings.lane_order


def _lane_orders(text: str) -> list[str]:
    """``--lane-orders``: a comma list of the device lane's thread orders, each known."""
    from gpu_stage.transform import LANE_ORDERS

    orders = [x for x in text.split(",") if x]
    unknown = [x for x in orders if x not in LANE_ORDERS]
    if unknown or not orders:
        msg = f"must be a comma list of {', '.join(LANE_ORDERS)}, not {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return list(dict.fromkeys(orders))


def parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--records", type=int, default=50_000, help="corpus size (generated or read)")
    corpora.add_options(p)
    p.add_argument("--backends", default="gpu,cpu", help="gpu_stage backends; gpu is skipped where unusable")
    p.add_argument("--peers", default="orjson,msgspec", help="Python peers, each on one core and on all cores")
    p.add_argument("--workers", type=int, default=usable_cores(), help="processes for the all-core peers")
    p.add_argument("--batch-size", type=int, default=100_000, help="batch size of the backends' main run")
    p.add_argument(
        "--passes",
        type=int,
        default=3,
        help="timed passes of each engine over the corpus; the median pass is its figure",
    )
    p.add_argument(
        "--native-threads",
        type=int,
        default=0,
        help="threads of the device lane's native core (0: every usable core), to hold gpu_stage to "
        "a few cores while the all-core peers use them all",
    )
    p.add_argument(
        "--input",
        choices=("objects", "packed", "both"),
        default="objects",
        help="batches of Python objects, packed batches streamed through the backends (-packed), or both",
    )
    p.add_argument("--sweep", type=_ints, default=[], help="batch sizes to sweep, e.g. 1000,10000,100000,1000000")
    p.add_argument(
        "--sweep-min-records",
        type=int,
        default=0,
        help="records per sweep point at least (the corpus is cycled); default: corpus size or 3 batches",
    )
    p.add_argument("--with-flink", action="store_true", help="also run the Flink SQL peer (needs Java and PyFlink)")
    p.add_argument("--flink-records", type=int, default=5_000, help="cap of the Flink peer's input")
    p.add_argument("--out", type=Path, help="result JSON (default bench/results/bench-<host>.json); PNG next to it")
    p.add_argument(
        "--lane-orders",
        type=_lane_orders,
        default=[_default_lane_order()],
        help="the device lane's thread orders to run the gpu backend in, each an engine of its own, comma "
        "separated: arrival (as they come), length (bodies of like length side by side in a warp), balanced "
        "(those bodies dealt round the warps), warp (in pass 1 a warp per body); an order other than "
        f"the lane's default ({_default_lane_order()}) ends its engines' names, e.g. gpu_stage-gpu-packed-length",
    )
    add_lane_knobs(p)
    return p


def _entry(engine: str, records: int, nbytes: int, seconds: float, checksum: Checksum) -> dict[str, Any]:
    return {
        "engine": engine,
        "records": records,
        "input_bytes": nbytes,
        "seconds": round(seconds, 4),
        "records_per_s": round(records / seconds, 1),
        "input_mb_per_s": round(nbytes / 1e6 / seconds, 2),
        "checksum": checksum.as_dict(),
    }


def run_peers(args: argparse.Namespace, values: list[bytes], nbytes: int) -> list[dict[str, Any]]:
    """Each peer on one core, then on ``--workers`` processes."""
    out = []
    for name in [n for n in args.peers.split(",") if n]:
        for workers in sorted({1, args.workers}):
            run = peers.run(name, values, workers, args.passes)
            label = f"{name}-1core" if workers == 1 else f"{name}-{workers}cores"
            entry = _entry(label, len(values), nbytes, run.seconds, run.checksum)
            out.append(entry | {"workers": workers, "passes": len(run.pass_seconds), "pass_seconds": run.pass_seconds})
            print(f"  {label}: {out[-1]['records_per_s']:,.0f} records/s", flush=True)
    return out


def run_flink(args: argparse.Namespace, values: list[bytes]) -> dict[str, Any]:
    """The Flink SQL peer on a capped prefix, with its own reference checksum (orjson on the same input)."""
    from bench import flink_peer

    if not flink_peer.java_available():
        return {"engine": "flink-sql", "skipped": "no java on PATH"}
    lines = flink_peer.flink_input(values[: args.flink_records])
    run = flink_peer.run(lines, args.workers)
    reference = peers.orjson_extract(lines)
    entry = _entry(f"flink-sql-p{run.parallelism}", run.records, sum(map(len, lines)), run.seconds, run.checksum)
    entry |= {
        "marginal_records_per_s": run.marginal_records_per_s,
        "note": "records_per_s includes job start; marginal_records_per_s = extra records / extra seconds "
        "between a run on a tenth of the input and the full run",
        "reference_checksum": reference.as_dict(),
        "checksum_diff": _diff(run.checksum, reference),
    }
    print(f"  flink: {entry['records_per_s']:,.0f} records/s ({run.marginal_records_per_s} marginal)", flush=True)
    return entry


def _diff(got: Checksum, want: Checksum) -> dict[str, int]:
    """Fields where ``got`` differs from ``want`` (got - want)."""
    a, b = got.as_dict(), want.as_dict()
    return {k: a[k] - b[k] for k in a if a[k] != b[k]}


def run_backends(args: argparse.Namespace, values: list[bytes]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Main run (with the value checksum) and the sweep, per usable backend."""
    from gpu_stage.transform import TransformSettings

    settings = TransformSettings(native_threads=args.native_threads or None)
    main_runs: list[dict[str, Any]] = []
    sweep: list[dict[str, Any]] = []
    for name in [n for n in args.backends.split(",") if n]:
        backend, why_not = backends.build(name, settings)
        if backend is None:
            main_runs.append({"engine": f"gpu_stage-{name}", "skipped": why_not})
            print(f"  gpu_stage-{name}: skipped ({why_not})", flush=True)
            continue
        set_lane_knobs(backend, lane_knobs(args))
        executor = getattr(getattr(backend, "lane", None), "executor", None)
        orders = args.lane_orders if executor is not None else [None]
        for packed in {"objects": [False], "packed": [True], "both": [False, True]}[args.input]:
            for order in orders:
                if executor is not None and order is not None:
                    executor.lane_order = order
                main_runs.append(_as_order(_main_run(args, backend, values, settings, packed), order))
                resources = getattr(executor, "kernel_resources", None)  # a CUDA build's code bytes and registers
                if resources is not None:
                    main_runs[-1]["kernels"] = resources()
                held = getattr(executor, "device_bytes", None)  # the lane's device buffers after the run
                if held is not None:
                    main_runs[-1]["device_bytes"] = held()
                print(f"  {main_runs[-1]['engine']}: {main_runs[-1]['records_per_s']:,.0f} records/s", flush=True)
                sweep += [_as_order(point, order) for point in _sweep(args, backend, values, settings, packed)]
    return main_runs, sweep


def _main_run(
    args: argparse.Namespace, backend: Any, values: list[bytes], settings: Any, packed: bool
) -> dict[str, Any]:
    """One backend's main run over the corpus, with the value checksum."""
    size = min(args.batch_size, len(values))
    return backends.run(backend, backends.batches(values, size), True, settings, packed, args.passes).as_dict()


def _sweep(
    args: argparse.Namespace, backend: Any, values: list[bytes], settings: Any, packed: bool
) -> list[dict[str, Any]]:
    """One backend at each ``--sweep`` batch size."""
    points = []
    for size in args.sweep:
        need = args.sweep_min_records or max(len(values), 3 * size)
        sized = backends.batches(values, size, need)
        point = backends.run(backend, sized, False, settings, packed, args.passes).as_dict()
        points.append(point)
        print(
            f"    sweep {size}: {point['records_per_s']:,.0f} records/s, "
            f"p50 {point['batch_latency_ms_p50']} ms, p99 {point['batch_latency_ms_p99']} ms",
            flush=True,
        )
    return points


def _as_order(entry: dict[str, Any], order: str | None) -> dict[str, Any]:
    """A device lane run's entry with its thread order, which ends the engine's name unless it is the default."""
    if order is None:
        return entry
    suffix = "" if order == _default_lane_order() else f"-{order}"
    return entry | {"engine": entry["engine"] + suffix, "lane_order": order}


def table(engines: list[dict[str, Any]]) -> str:
    """Text table: rate, MB/s, checksum agreement, and this engine's rate over each peer's."""
    done = [e for e in engines if "skipped" not in e]
    peer_names = [e["engine"] for e in done if not e["engine"].startswith("gpu_stage")]
    # Flink's marginal rate (start-up excluded) where it could be measured: the fairer figure for it.
    rate = {e["engine"]: e.get("marginal_records_per_s") or e["records_per_s"] for e in done}
    head = f"{'engine':<30}{'records/s':>12}{'MB/s':>9}  {'checksum':<9}"
    head += "".join(f"{'x ' + p:>20}" for p in peer_names)
    lines = [head, "-" * len(head)]
    for e in done:
        ratios = "".join(f"{rate[e['engine']] / rate[p]:>20.2f}" for p in peer_names)
        mb_s = e["input_mb_per_s"] * rate[e["engine"]] / e["records_per_s"]
        lines.append(
            f"{e['engine']:<30}{rate[e['engine']]:>12,.0f}{mb_s:>9.1f}  {e.get('checksum_ok', '-')!s:<9}{ratios}"
        )
    lines += [f"{e['engine']:<30}skipped: {e['skipped']}" for e in engines if "skipped" in e]
    return "\n".join(lines)


def _check(engines: list[dict[str, Any]], reference: dict[str, int]) -> None:
    for e in engines:
        if "checksum" not in e or e["engine"].startswith("flink"):
            continue
        e["checksum_ok"] = e["checksum"] == reference
        if not e["checksum_ok"]:
            e["checksum_diff"] = _diff(Checksum(**e["checksum"]), Checksum(**reference))
    for e in engines:
        if e["engine"].startswith("flink") and "checksum_diff" in e:
            e["checksum_ok"] = not e["checksum_diff"]


def main(argv: list[str] | None = None) -> int:
    """Run everything asked for, print the table, write JSON (and the sweep PNG)."""
    logging.basicConfig(level=logging.WARNING)
    p = parser()
    args = p.parse_args(argv)
    corpora.check(p, args)
    facts = machine.facts()
    data = corpora.load(args, args.records)
    tune_process()  # as the worker does; the peers run under the same setting
    info = data.facts()
    print(
        f"corpus {info['config'].get('corpus', 'generated')}: {info['records']:,} bodies, "
        f"{info['bytes'] / 1e6:.1f} MB, mean {info['mean_body_bytes']} B, "
        f"a warp's longest body {info['warp_longest_to_mean']}x the mean, sha256 {info['sha256'][:16]}",
        flush=True,
    )
    engines = run_peers(args, data.values, data.bytes)
    if args.with_flink:
        engines.append(run_flink(args, data.values))
    main_runs, sweep = run_backends(args, data.values)
    engines = main_runs + engines
    reference = next((e["checksum"] for e in engines if "checksum" in e), None)
    if reference is not None:
        _check(engines, reference)
    text = table(engines)
    print(text)
    out = args.out or RESULTS / f"bench-{socket.gethostname()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "machine": facts,
        "corpus": info,
        "batch_size": args.batch_size,
        "lane": {k: v for k, v in lane_knobs(args).items() if v is not None}
        | {"orders": args.lane_orders, "outline": ",".join(lane_outline())},
        "engines": engines,
        "sweep": sweep,
        "table": text.splitlines(),
        "argv": sys.argv[1:] if argv is None else argv,
    }
    if sweep:
        from bench.plot import sweep_png

        png = out.with_suffix(".png")
        sweep_png(
            sweep,
            png,
            f"gpu_stage batch-size sweep on {facts['host']} ({facts['gpu'] or facts['cpu_model']}), "
            f"mean body {info['mean_body_bytes']} B",
        )
        result["plot"] = png.name
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
