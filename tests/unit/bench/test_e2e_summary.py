"""The worker's closing summary line is what ``bench.e2e_worker`` parses: keep the two in step."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from bench.e2e_worker import SUMMARY
from gpu_stage.worker import Totals, Worker


def test_summary_line_parses(caplog: pytest.LogCaptureFixture) -> None:
    totals = Totals(records_in=1000, typed=990, dead=10, batches=3, aborts=1)
    totals.first_input_at, totals.last_commit_at = 1_700_000_000.25, 1_700_000_002.75
    caplog.set_level(logging.INFO, logger="gpu_stage.worker")
    Worker._summary(SimpleNamespace(totals=totals, backend=SimpleNamespace(name="cpu")))  # type: ignore[arg-type]
    found = SUMMARY.findall(caplog.records[-1].getMessage())
    assert found == [("1000", "990", "10", "3", "1", "1700000000.250", "1700000002.750", "400")]


def test_busy_rate_needs_both_ends() -> None:
    totals = Totals(records_in=500)
    assert totals.busy_rate() == 0.0
    totals.first_input_at, totals.last_commit_at = 10.0, 12.0
    assert totals.busy_rate() == 250.0
