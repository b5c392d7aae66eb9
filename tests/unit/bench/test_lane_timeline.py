"""The device timeline's summary: step means from device intervals, host waits, gaps between passes 2."""

from __future__ import annotations

from bench.lane_timeline import Step, summary


def test_summary_of_two_batches() -> None:
    steps = [
        Step(0, "copy_in", (0.0, 2.0), None),
        Step(0, "pass1", (0.0, 4.0), (0.0, 1.0)),
        Step(0, "wait_pass1", None, (1.0, 4.0)),
        Step(1, "copy_in", (4.0, 6.5), None),
        Step(1, "pass1", (4.0, 8.0), (4.0, 5.0)),
        Step(0, "pass2", (5.0, 11.0), (5.0, 6.0)),
        Step(0, "pass2_kernels", (5.0, 9.0), None),
        Step(1, "wait_pass1", None, (6.0, 8.0)),
        Step(0, "wait_pass2", None, (8.0, 11.0)),
        Step(1, "pass2", (13.0, 17.0), (13.0, 14.0)),
        Step(1, "pass2_kernels", (13.0, 16.0), None),
        Step(1, "wait_pass2", None, (14.0, 17.0)),
    ]
    assert summary(steps) == {
        "copy_in_ms": 2.25,  # (2 + 2.5) / 2
        "pass1_with_copy_in_ms": 4.0,
        "pass2_ms": 5.0,  # (6 + 4) / 2
        "pass2_kernels_ms": 3.5,  # (4 + 3) / 2: the kernels alone, without the copies out after them
        "gap_between_passes_2_ms": 2.0,  # 13 - 11
        "host_wait_pass1_ms": 2.5,  # (3 + 2) / 2
        "host_wait_pass2_ms": 3.0,
    }


def test_summary_of_nothing() -> None:
    assert set(summary([]).values()) == {0.0}
