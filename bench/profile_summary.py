"""``python -m bench.profile_summary FILE``: where each thread of a py-spy speedscope profile spent its time.

For every thread: its sampled seconds, then the functions it was in longest (inclusive: a sample
counts once for each function on its stack) and the leaf lines it was on longest. The samples are
wall-clock (``py-spy record --idle``), so a thread waiting inside a C call (for fetched records, for
the GIL, for the device) counts at the Python line that made the call.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any


def summarise(profile: dict[str, Any], top: int) -> list[dict[str, Any]]:
    """Per thread: name, seconds, and the ``top`` functions and leaf lines by seconds."""
    frames = profile["shared"]["frames"]
    names = [f"{f['name']} ({Path(f['file']).name}:{f['line']})" for f in frames]
    functions = [f"{f['name']} ({Path(f['file']).name})" for f in frames]
    out = []
    for thread in profile["profiles"]:
        inclusive: Counter[str] = Counter()
        leaves: Counter[str] = Counter()
        for stack, weight in zip(thread["samples"], thread["weights"], strict=True):
            for function in {functions[i] for i in stack}:
                inclusive[function] += weight
            if stack:
                leaves[names[stack[-1]]] += weight
        out.append({
            "thread": thread["name"], "seconds": round(sum(thread["weights"]), 2),
            "functions": [(name, round(s, 2)) for name, s in inclusive.most_common(top)],
            "leaves": [(name, round(s, 2)) for name, s in leaves.most_common(top)],
        })  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the summary of one profile."""
    p = argparse.ArgumentParser(prog="python -m bench.profile_summary", description=__doc__)
    p.add_argument("profile", type=Path, help="speedscope JSON written by py-spy")
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args(argv)
    for thread in summarise(json.loads(args.profile.read_text()), args.top):
        print(f"\n{thread['thread']}: {thread['seconds']} s sampled")
        print("  longest in (inclusive s):")
        for name, seconds in thread["functions"]:
            print(f"    {seconds:8.2f}  {name}")
        print("  on these lines (s):")
        for name, seconds in thread["leaves"]:
            print(f"    {seconds:8.2f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
