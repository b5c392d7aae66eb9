"""The worker's closing summary line is what ``bench.e2e_worker`` parses: keep the two in step."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.e2e_worker import STEPS, SUMMARY, summaries
from gpu_stage.worker import Totals, Worker


def test_summary_line_parses(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    totals = Totals(records_in=1000, typed=990, dead=10, batches=4, aborts=1)
    totals.first_input_at, totals.last_commit_at = 1_700_000_000.25, 1_700_000_002.75
    totals.stage_seconds.update(collect=0.08, parse=0.01, produce=0.2, commit=1.0, wait=0.4)
    caplog.set_level(logging.INFO, logger="gpu_stage.worker")
    Worker._summary(SimpleNamespace(totals=totals, backend=SimpleNamespace(name="cpu")))  # type: ignore[arg-type]
    line = caplog.records[-1].getMessage()
    assert SUMMARY.findall(line) == [("1000", "990", "10", "4", "1", "1700000000.250", "1700000002.750", "400")]
    assert STEPS.findall(line) == [("20.0", "2.5", "50.0", "250.0", "100.0")]
    (tmp_path / "worker-0.log").write_text("started\n" + line + "\n")
    parsed = summaries(tmp_path, 1)[0]
    steps = (parsed["collect_ms"], parsed["commit_ms"], parsed["wait_ms"])
    assert (parsed["batches"], *steps) == (4.0, 20.0, 250.0, 100.0)


def test_busy_rate_needs_both_ends() -> None:
    totals = Totals(records_in=500)
    assert totals.busy_rate() == 0.0
    totals.first_input_at, totals.last_commit_at = 10.0, 12.0
    assert totals.busy_rate() == 250.0
