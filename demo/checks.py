"""Independent checks of one run: every record accounted for once, and the feature rows recomputed.

The expected feature rows are computed here in plain Python from the typed records the demo read back,
not with the job's SQL, so a wrong query, a dropped window or a double-counted record shows up.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from demo.measure import Contents, epoch_ms

MINUTE_MS = 60_000
Row = dict[str, Any]


@dataclass
class Verdict:
    """Named checks and whether each held; the demo exits non-zero when any failed."""

    results: list[tuple[str, bool, str]] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        """Record one check."""
        self.results.append((name, ok, detail))

    @property
    def ok(self) -> bool:
        """All checks held."""
        return all(ok for _, ok, _ in self.results)


def check_counts(verdict: Verdict, requests: int, contents: Contents) -> None:
    """Check requests = raw + connector DLQ; raw = typed + gpu_stage DLQ; each raw record once downstream."""
    by_stage = Counter(stage for stage, _ in contents.dlq_by_label().elements())
    raw_keys = [m.key or b"" for m in contents.raw]
    gpu_dlq_keys = [m.key or b"" for m in contents.dlq if dict(m.headers).get("__dlq.stage") == b"gpu_stage"]
    n_raw, n_typed = len(contents.raw), len(contents.typed)
    verdict.check("requests == raw + connector DLQ", requests == n_raw + by_stage["connector"],
                  f"{requests} == {n_raw} + {by_stage['connector']}")
    verdict.check("raw == typed + gpu_stage DLQ", n_raw == n_typed + by_stage["gpu_stage"],
                  f"{n_raw} == {n_typed} + {by_stage['gpu_stage']}")
    downstream = Counter(contents.typed_keys) + Counter(gpu_dlq_keys)
    verdict.check("every raw record exactly once downstream",
                  Counter(raw_keys) == downstream and len(set(raw_keys)) == n_raw,
                  f"{len(set(raw_keys))} distinct raw keys, {len(downstream)} distinct downstream keys")


def _sum(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _row(model: str | None, start: int, rows: list[Row]) -> Row:
    n = len(rows)
    latencies = [r["latency_ms"] for r in rows if r["latency_ms"] is not None]
    fast = [r for r in rows if r["content_valid"] is True and (r["latency_ms"] or 0) > 0
            and r["completion_tokens"] is not None]
    fast_latency = sum(r["latency_ms"] for r in fast)
    return {
        "window_start": start, "window_end": start + MINUTE_MS, "model": model, "requests": n,
        "prompt_tokens": _sum(r["prompt_tokens"] for r in rows),
        "completion_tokens": _sum(r["completion_tokens"] for r in rows),
        "total_tokens": _sum(r["total_tokens"] for r in rows),
        "latency_ms_mean": sum(latencies) / len(latencies) if latencies else None,
        "latency_ms_max": max(latencies) if latencies else None,
        "length_share": sum(r["finish_reason"] == "length" for r in rows) / n,
        "invalid_json_share": sum(r["content_valid"] is False for r in rows) / n,
        "tool_call_share": sum(r["tool_name"] is not None or r["tool_arguments"] is not None for r in rows) / n,
        "valid_json_tokens_per_s": sum(r["completion_tokens"] for r in fast) * 1000 / fast_latency
        if fast else None,
    }


def expected_model_minute(typed: list[Row]) -> dict[tuple[str | None, int], Row]:
    """``jobs.model_minute`` recomputed: per model and 1-minute window of ``created``."""
    groups: dict[tuple[str | None, int], list[Row]] = defaultdict(list)
    for row in typed:
        created = epoch_ms(row["created"])
        if created is not None:
            groups[(row["model"], created - created % MINUTE_MS)].append(row)
    return {key: _row(key[0], key[1], rows) for key, rows in groups.items()}


def _iso_ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def normalise_feature(row: Row) -> Row:
    """A feature row as the job wrote it (JSON), with window bounds as epoch ms."""
    return {**row, "window_start": _iso_ms(row["window_start"]), "window_end": _iso_ms(row["window_end"])}


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    return bool(got == want)


def check_features(verdict: Verdict, features: list[Row], typed: list[Row]) -> None:
    """Every feature row equals the recomputed one, and no window is missing or extra."""
    want = expected_model_minute(typed)
    got = {(r["model"], r["window_start"]): r for r in map(normalise_feature, features)}
    verdict.check("feature windows == windows in typed data", set(got) == set(want),
                  f"{len(got)} rows from the job, {len(want)} recomputed")
    wrong = [key for key in set(got) & set(want)
             if any(not _same(got[key].get(col), value) for col, value in want[key].items())]
    verdict.check("every feature row equals its recomputation", not wrong,
                  f"{len(wrong)} differ" + (f", e.g. {wrong[0]}" if wrong else ""))
    verdict.check("feature requests sum == typed records", sum(r["requests"] for r in got.values()) == len(typed),
                  f"{sum(r['requests'] for r in got.values())} == {len(typed)}")
