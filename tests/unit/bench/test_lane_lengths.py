"""``bench.lane_lengths``: pass 1 of the CPU-built lane by body length class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("numba")

from bench import lane_lengths
from gpu_stage import synth


def test_each_class_holds_the_bodies_of_its_lengths() -> None:
    short, long = synth.bodies(30), [b" " * 5000 + body for body in synth.bodies(4)]
    rows = lane_lengths.measure(short + long, repeats=1)
    by_class = {(row["above"], row["up_to"]): row for row in rows}
    assert sum(row["bodies"] for row in rows) == 34
    assert by_class[(4096, 8192)]["bodies"] == 4
    assert all(row["us_per_body"] > 0 and row["ns_per_byte"] > 0 for row in rows)
    assert all(row["above"] < row["mean_bytes"] <= row["up_to"] for row in rows)


def test_main_writes_the_table_with_its_corpus(tmp_path: Path) -> None:
    out = tmp_path / "lengths.json"
    lane_lengths.main(["--records", "300", "--corpus", "synth", "--repeats", "1", "--out", str(out)])
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["corpus"]["corpus"] == "synth" and sum(r["bodies"] for r in written["classes"]) == 300
