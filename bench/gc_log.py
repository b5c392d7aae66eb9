"""The broker's stop-the-world GC pauses over a run, from its GC log (``-Xlog:gc*`` with ``time`` decorations).

Every request the broker serves waits out a pause, so a pause lines up with a latency tail or it
does not: a run's result lists the pauses in its window with their offset from the load's start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

# [2026-12-03T11:31:51.373+0000][1.664s][gc          ] GC(0) Pause Young (Normal) (G1 Evacuation Pause)
#     63M->8M(2048M) 29.087ms      (one line: time, uptime, the tag "gc" alone, kind, heap before -> after, length)
_PAUSE = re.compile(
    r"^\[(?P<time>[^\]]+)\](?:\[[^\]]*\])*?\[gc\s*\] GC\(\d+\) (?P<kind>Pause .*?) "
    r"\d+[KMG]->\d+[KMG]\(\d+[KMG]\) (?P<ms>[0-9.]+)ms$"
)

LISTED_MS = 5.0
"""Pauses at least this long are listed one by one; shorter ones only count in the totals."""


@dataclass(frozen=True)
class Pause:
    """One stop-the-world pause: when it ended (epoch s), how long it took, which kind it was."""

    end_s: float
    ms: float
    kind: str

    @property
    def start_s(self) -> float:
        """When the pause began: the log line is written at its end."""
        return self.end_s - self.ms / 1000


def pauses(text: str) -> list[Pause]:
    """Every pause line of a GC log, in order; other lines (phases, heap, concurrent cycles) are skipped."""
    found = []
    for line in text.splitlines():
        match = _PAUSE.match(line.rstrip())
        if match:
            end = datetime.strptime(match["time"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
            found.append(Pause(end, float(match["ms"]), match["kind"].strip()))
    return found


def read(path: Path) -> list[Pause]:
    """The pauses of a GC log and its rotated files (``name.0`` … as ``filecount`` names them), oldest first."""
    files = [p for p in path.parent.glob(path.name + "*") if p.is_file()]
    return sorted((p for f in files for p in pauses(f.read_text(encoding="utf-8", errors="replace"))),
                  key=lambda p: p.end_s)  # fmt: skip


def window(found: list[Pause], start_s: float, end_s: float) -> dict[str, Any]:
    """Count, total and longest pause that began in ``[start_s, end_s)``, and those of ``LISTED_MS`` or more.

    Listed pauses carry their start as seconds from ``start_s``, to set against a per-second latency.
    """
    inside = [p for p in found if start_s <= p.start_s < end_s]
    total_ms = sum(p.ms for p in inside)
    return {
        "pauses": len(inside),
        "total_ms": round(total_ms, 1),
        "max_ms": round(max((p.ms for p in inside), default=0.0), 1),
        "share": round(total_ms / 1000 / (end_s - start_s), 4) if end_s > start_s else None,
        "long": [{"at_s": round(p.start_s - start_s, 3), "ms": p.ms, "kind": p.kind}
                 for p in inside if p.ms >= LISTED_MS],
    }  # fmt: skip


def figures(path: Path | None, start_s: float, end_s: float) -> dict[str, Any]:
    """The ``broker_gc`` entry of a run's result: the window's pauses, or why there are none."""
    if path is None:
        return {}
    if not path.exists():
        return {"broker_gc": {"missing": str(path)}}
    return {"broker_gc": window(read(path), start_s, end_s)}
