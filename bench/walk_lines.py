"""``python -m bench.walk_lines``: how much of pass 1's walk each body costs, counted in executed source lines.

A batch's pass 1 lasts as long as its slowest warps, and a warp as long as its costliest bodies
(its 32 threads take turns where their bodies differ). This runs the strings pass of the lane
compiled for the CPU (the device's marks), then pass 1's row function from its plain Python source
under a line tracer, body by body, and counts the lines each body executes, by phase (the body's
walk, the content check, tool arguments, the size, the record's columns, the checks of a body it
gives up on). The counts are a proxy for a thread's instructions, not a speed figure: they show
which bodies cost many times a typical one, and where that goes. Each body's size is checked against
the compiled lane's. No GPU needed; about 100 bodies a second.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from types import FrameType
from typing import Any

import numpy as np

from bench import corpora
from bench.transform import write_result
from gpu_stage.synth import batch
from gpu_stage.transform import TransformSettings
from gpu_stage.transform.device import CpuExecutor, LaneTransform
from gpu_stage.transform.device import rows as plain_rows
from gpu_stage.transform.device.columns import LaneInput
from llmpipe.runtime import configure_logging

log = logging.getLogger("bench.walk_lines")

PHASES = ("content_state", "tool_arguments", "emit", "record_columns", "error_body", "body_verdict")
"""Functions whose lines (their callees' included) count as a phase of their own; the rest is ``walk``."""
PERCENTILES = (50, 90, 99, 99.9, 100)


class _Capture(CpuExecutor):
    """The CPU executor, keeping the last batch's pass 1 (its arrays) for the traced pass."""

    last: Any = None

    def submit(self, li: LaneInput, n: int, slot: int) -> Any:
        _Capture.last = super().submit(li, n, slot)
        return _Capture.last


class _Tracer:
    """Counts executed lines by (phase, function) while installed with ``sys.settrace``."""

    def __init__(self) -> None:
        self.lines: Counter[tuple[str, str]] = Counter()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.lines[(_phase(frame), frame.f_code.co_name)] += 1
        return self


def _phase(frame: FrameType | None) -> str:
    """The outermost :data:`PHASES` function on the stack below ``measure_row``, else ``walk``."""
    phase = "walk"
    while frame is not None and frame.f_code.co_name != "measure_row":
        if frame.f_code.co_name in PHASES:
            phase = frame.f_code.co_name
        frame = frame.f_back
    return phase


def count(values: list[bytes]) -> list[Counter[tuple[str, str]]]:
    """Each body's executed lines of pass 1 by (phase, function); its size checked against the compiled lane's."""
    lane = LaneTransform(TransformSettings(), _Capture)
    lane.measure(batch(values))
    done, ex = _Capture.last, lane.executor
    assert isinstance(ex, CpuExecutor)
    li, sizes = done.li, done.sizes
    # Pass 1 rewrites tool arguments in the decoded copy: the strings pass is run again to start afresh.
    ex.mark(li.values, done.marks, done.decoded, li.value_ends, ex.max_bytes, len(values))
    before, after = ex.row_args(li, done.marks, done.decoded, done.slots, done.content)
    counts = []
    for r in range(len(values)):
        tracer = _Tracer()
        sys.settrace(tracer)
        try:
            size = plain_rows.measure_row(*before, r, *after)
        finally:
            sys.settrace(None)
        if size != sizes[r]:
            msg = f"body {r}: the traced pass 1 gave size {size}, the compiled lane {sizes[r]}"
            raise RuntimeError(msg)
        counts.append(tracer.lines)
    return counts


def summary(counts: list[Counter[tuple[str, str]]], top: int = 15) -> dict[str, Any]:
    """Percentiles of a body's lines; each phase's share of all lines and of the costliest 1 %'s; top functions."""
    totals = np.array([sum(c.values()) for c in counts], dtype=np.float64)
    costliest = np.argsort(-totals)[: max(1, len(counts) // 100)]

    def shares(rows: Any) -> tuple[dict[str, float], list[tuple[str, float]]]:
        phases: Counter[str] = Counter()
        functions: Counter[str] = Counter()
        for r in rows:
            for (phase, function), lines in counts[r].items():
                phases[phase] += lines
                functions[f"{phase}: {function}"] += lines
        whole = sum(phases.values()) or 1
        by_function = [(name, round(lines / whole, 4)) for name, lines in functions.most_common(top)]
        return {p: round(lines / whole, 4) for p, lines in phases.most_common()}, by_function

    all_phases, _ = shares(range(len(counts)))
    top_phases, top_functions = shares(costliest)
    return {
        "bodies": len(counts),
        "lines_per_body": {f"p{p:g}": float(np.percentile(totals, p)) for p in PERCENTILES},
        "lines_total": int(totals.sum()),
        "phase_share": all_phases,
        "costliest_1pct_phase_share": top_phases,
        "costliest_1pct_functions": top_functions,
    }


def main(argv: list[str] | None = None) -> int:
    """Make (or read) the corpus, count, print, write the JSON."""
    configure_logging("INFO")
    args, made = corpora.command("python -m bench.walk_lines", __doc__.splitlines()[0], 12_800, argv)
    result = {"corpus": made.facts()} | summary(count(list(made.values)))
    log.info("%d bodies; executed lines per body: %s", result["bodies"],
             ", ".join(f"{k} {v:,.0f}" for k, v in result["lines_per_body"].items()))  # fmt: skip
    log.info("share of all lines by phase: %s", result["phase_share"])
    log.info("share of the costliest 1 %%'s lines by phase: %s", result["costliest_1pct_phase_share"])
    for name, share in result["costliest_1pct_functions"]:
        log.info("  %5.1f %%  %s", 100 * share, name)
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
