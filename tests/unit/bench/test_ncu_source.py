"""``bench.ncu_source``: an Nsight Compute source page summed by source line, then by device function."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

from bench import ncu_source

HEADER = ["Line No", "Source", "Address", "Source", *ncu_source.METRICS.values(), "Divergent Branches"]


def _page(path: Path, sources: Path) -> Path:
    """Two files' lines as the page lays them out: a file's header, a line row, then its SASS rows."""
    (sources / "a.py").write_text("def f(x):\n    return x\n\n\ndef g(y):\n    return y\n", encoding="utf-8")
    (sources / "b.py").write_text("def h():\n    pass\n", encoding="utf-8")
    rows = [
        ["File Path", str(sources / "a.py")], ["Function Name", "measure(...)"], HEADER,
        ["2", "    return x", "-", "-", "60", "1,000", "8000", "0"],
        ["", "", "0x10", "LDG.E.U8", "40", "600", "4800", "0"],  # a SASS row: not counted again
        ["6", "    return y", "-", "-", "20", "500", "16000", "0"],
        ["File Path", str(sources / "b.py")], HEADER,
        ["2", "    pass", "-", "-", "20", "500", "1000", "0"],
    ]  # fmt: skip
    with gzip.open(path, "wt", newline="") as out:
        csv.writer(out).writerows(rows)
    return path


def test_lines_are_summed_and_charged_to_their_function(tmp_path: Path) -> None:
    page = _page(tmp_path / "page.csv.gz", tmp_path)
    figures = ncu_source.line_figures(page)
    assert figures[("a.py", 2)] == {"samples": 60.0, "warp_instructions": 1000.0, "thread_instructions": 8000.0}
    summary = ncu_source.summarize(figures, top=5, folder=tmp_path)
    by_name = {f["name"]: f for f in summary["functions"]}
    assert list(by_name) == ["a.py:f", "a.py:g", "b.py:h"]  # by samples, largest first
    assert by_name["a.py:f"]["samples_pct"] == 60.0
    assert by_name["a.py:g"]["warp_instructions_pct"] == 25.0
    assert by_name["a.py:g"]["threads_per_instruction"] == 32.0
    assert summary["lines"][0] == {**by_name["a.py:f"], "name": "a.py:2", "function": "a.py:f"}


def test_main_writes_the_summary(tmp_path: Path) -> None:
    page = _page(tmp_path / "page.csv.gz", tmp_path)
    ncu_source.main([str(page), "--sources", str(tmp_path), "--out", str(tmp_path / "s.json")])
    written = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert written["totals"]["samples"] == 100.0 and len(written["functions"]) == 3
