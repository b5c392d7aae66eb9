"""Pass 1's warp-stall samples and instructions by device function and by source line, from Nsight Compute.

Reads the source page that ``bench/gpu_host.sh OUT source`` writes (``ncu --page source --csv
--print-source cuda,sass`` of the lane's kernel built with line information, gzip'd): each source
line's row carries its stall samples and executed instructions. Lines are charged to the innermost
function of the lane's sources that holds them (``--sources``: the profiled revision's device
folder), so a device function's figure is its own lines', wherever it was inlined. Prints the tables
and writes them as JSON.

    python -m bench.ncu_source bench/results/ncu-pass1-source-h200.csv.gz --sources DIR --out FILE.json
"""

from __future__ import annotations

import argparse
import ast
import collections
import csv
import gzip
import json
from pathlib import Path
from typing import Any

DEVICE = Path(__file__).resolve().parent.parent / "gpu_stage" / "transform" / "device"
METRICS = {
    "samples": "Warp Stall Sampling (All Samples)",
    "warp_instructions": "Instructions Executed",
    "thread_instructions": "Thread Instructions Executed",
}


def line_figures(path: Path) -> dict[tuple[str, int], dict[str, float]]:
    """Each (source file, line)'s metrics, summed over the kernel's rows for it."""
    figures: dict[tuple[str, int], dict[str, float]] = collections.defaultdict(lambda: dict.fromkeys(METRICS, 0.0))
    source = ""
    columns: dict[str, int] = {}
    with gzip.open(path, "rt", newline="") as text:
        for row in csv.reader(text):
            if not row:
                continue
            if row[0] == "File Path":
                source = Path(row[1]).name
            elif row[0] == "Line No":
                columns = {name: i for i, name in enumerate(row)}
            elif columns and row[0].isdigit():
                into = figures[(source, int(row[0]))]
                for key, name in METRICS.items():
                    into[key] += _number(row[columns[name]])
    return figures


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def function_at(source: str, line: int, spans: dict[str, list[tuple[int, int, str]]], folder: Path) -> str:
    """The innermost function of ``source`` (a lane source file in ``folder``) holding ``line``, or ``?``.

    ``spans`` keeps each file's function spans, parsed on first use.
    """
    if source not in spans:
        path = folder / source
        tree = ast.parse(path.read_text(encoding="utf-8")) if path.exists() else ast.Module(body=[], type_ignores=[])
        spans[source] = [
            (node.lineno, node.end_lineno or node.lineno, node.name)
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef)
        ]
    holding = [(start, name) for start, end, name in spans[source] if start <= line <= end]
    return max(holding)[1] if holding else "?"


def summarize(figures: dict[tuple[str, int], dict[str, float]], top: int, folder: Path = DEVICE) -> dict[str, Any]:
    """Shares of the kernel's samples and instructions by function and by line, largest first."""
    totals = {key: sum(f[key] for f in figures.values()) or 1.0 for key in METRICS}
    spans: dict[str, list[tuple[int, int, str]]] = {}
    by_function: dict[str, dict[str, float]] = collections.defaultdict(lambda: dict.fromkeys(METRICS, 0.0))
    lines = []
    for (source, line), f in figures.items():
        name = f"{source}:{function_at(source, line, spans, folder)}"
        for key in METRICS:
            by_function[name][key] += f[key]
        lines.append((f"{source}:{line}", name, f))

    def shares(name: str, f: dict[str, float]) -> dict[str, Any]:
        active = f["thread_instructions"] / f["warp_instructions"] if f["warp_instructions"] else 0.0
        return {"name": name, **{f"{k}_pct": round(100 * f[k] / totals[k], 2) for k in METRICS},
                "threads_per_instruction": round(active, 2)}  # fmt: skip

    ranked = sorted(by_function.items(), key=lambda kv: -kv[1]["samples"])
    hottest = sorted(lines, key=lambda x: -x[2]["samples"])[:top]
    return {
        "totals": totals,
        "functions": [shares(name, f) for name, f in ranked[:top]],
        "lines": [shares(at, f) | {"function": fn} for at, fn, f in hottest],
    }


def main(argv: list[str] | None = None) -> None:
    """Print and write the summary of one source page."""
    p = argparse.ArgumentParser(prog="python -m bench.ncu_source", description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path, help="the gzip'd source page (cuda,sass) of one kernel")
    p.add_argument("--sources", type=Path, default=DEVICE, help="the profiled revision's gpu_stage/transform/device")
    p.add_argument("--top", type=int, default=25, help="functions and lines listed")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    summary = summarize(line_figures(args.csv), args.top, args.sources)
    t = summary["totals"]
    print(f"samples {t['samples']:.0f}, warp instructions {t['warp_instructions']:.3g}, "
          f"thread instructions {t['thread_instructions']:.3g}")  # fmt: skip
    print(f"{'function':40s} {'samples %':>9s} {'warp instr %':>12s} {'threads/instr':>13s}")
    for f in summary["functions"]:
        print(f"{f['name']:40s} {f['samples_pct']:9.2f} {f['warp_instructions_pct']:12.2f} "
              f"{f['threads_per_instruction']:13.2f}")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
