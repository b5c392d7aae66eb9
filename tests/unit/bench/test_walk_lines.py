"""``bench.walk_lines``: each body's executed lines of pass 1, by phase, from the lane's plain source."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("numba")

from bench.walk_lines import count, summary
from gpu_stage import synth


def _tool_chat(keys: int) -> bytes:
    arguments = json.dumps({f"key{k}": f"value {k}" for k in range(keys)})
    call = {"id": "t", "type": "function", "function": {"name": "f", "arguments": arguments}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    body = {"id": "c", "object": "chat.completion", "created": 1700000000, "model": "m", "choices": [choice]}
    return json.dumps(body).encode()


def test_each_body_is_counted_by_phase_and_the_costly_ones_stand_out() -> None:
    good = synth.bodies(1)[0]
    truncated = good[: len(good) // 2]
    small, large = _tool_chat(2), _tool_chat(8)
    counts = count([good, truncated, small, large])
    phases = [{phase for phase, _ in c} for c in counts]
    assert "emit" in phases[0] and not phases[0] & {"error_body", "body_verdict"}
    assert {"error_body", "body_verdict"} <= phases[1] and "emit" not in phases[1]  # a dead letter, no datum
    tool_lines = [sum(n for (phase, _), n in c.items() if phase == "tool_arguments") for c in counts[2:]]
    # Four times the keys, under five times the lines: a key is read once, not again for each key after it.
    assert 0 < tool_lines[0] < tool_lines[1] < 5 * tool_lines[0]
    got = summary(counts)
    totals = sorted(sum(c.values()) for c in counts)
    assert got["bodies"] == 4 and got["lines_total"] == sum(totals)
    assert got["lines_per_body"]["p100"] == totals[-1]
    assert sum(got["phase_share"].values()) == pytest.approx(1, abs=1e-3)
