"""The broker's GC pauses read from its log, and the latency run's first seconds in 100 ms windows."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from bench import gc_log
from bench.e2e_latency import by_tenth
from stack.broker import GC_LOG, jvm_options

# Lines as JDK 17's -Xlog:gc*:…:time,uptime,tags writes them: one pause line per pause, tagged [gc] alone,
# among phase, heap and concurrent-cycle lines that must not count.
_STAMP = "[2026-12-03T11:31:{}+0000][{}s][{}] GC({}) "
LOG = "".join(_STAMP.format(*stamp) + text + "\n" for stamp, text in [
    (("51.345", "1.635", "gc,start    ", 0), "Pause Young (Normal) (G1 Evacuation Pause)"),
    (("51.373", "1.664", "gc,phases   ", 0), "  Evacuate Collection Set: 24.7ms"),
    (("51.373", "1.664", "gc          ", 0), "Pause Young (Normal) (G1 Evacuation Pause) 63M->8M(2048M) 28.000ms"),
    (("51.374", "1.664", "gc          ", 1), "Concurrent Mark Cycle"),
    (("51.402", "1.693", "gc          ", 1), "Pause Remark 9M->9M(2048M) 2.000ms"),
    (("51.426", "1.717", "gc          ", 1), "Concurrent Mark Cycle 52.792ms"),
    (("53.012", "3.303", "gc          ", 2),
     "Pause Young (Concurrent Start) (Metadata GC Threshold) 111M->25M(2048M) 33.195ms"),
])  # fmt: skip


def _epoch(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def test_only_pause_lines_count_and_each_begins_its_length_before_its_line() -> None:
    found = gc_log.pauses(LOG)
    assert [(p.kind, p.ms) for p in found] == [
        ("Pause Young (Normal) (G1 Evacuation Pause)", 28.0),
        ("Pause Remark", 2.0),
        ("Pause Young (Concurrent Start) (Metadata GC Threshold)", 33.195),
    ]
    assert found[0].start_s == pytest.approx(_epoch("2026-12-03T11:31:51.345+0000"))


def test_a_window_counts_the_pauses_that_began_in_it_and_lists_the_long_ones() -> None:
    found = gc_log.pauses(LOG)
    start = _epoch("2026-12-03T11:31:51.000+0000")
    figures = gc_log.window(found, start, start + 1.5)  # the third pause begins after the window
    assert (figures["pauses"], figures["total_ms"], figures["max_ms"]) == (2, 30.0, 28.0)
    assert figures["share"] == pytest.approx(0.02)
    assert figures["long"] == [{"at_s": 0.345, "ms": 28.0, "kind": "Pause Young (Normal) (G1 Evacuation Pause)"}]
    assert gc_log.window(found, start + 10, start + 11) == {"pauses": 0, "total_ms": 0, "max_ms": 0.0,
                                                            "share": 0.0, "long": []}  # fmt: skip


def test_rotated_files_are_read_oldest_first_and_a_missing_log_is_named(tmp_path: Path) -> None:
    lines = LOG.splitlines(keepends=True)
    (tmp_path / f"{GC_LOG}.0").write_text("".join(lines[:3]))
    (tmp_path / GC_LOG).write_text("".join(lines[3:]))
    assert [p.ms for p in gc_log.read(tmp_path / GC_LOG)] == [28.0, 2.0, 33.195]
    assert gc_log.figures(None, 0, 1) == {}
    assert gc_log.figures(tmp_path / "absent.log", 0, 1) == {"broker_gc": {"missing": str(tmp_path / "absent.log")}}


def test_the_broker_jvm_gets_kafkas_gc_settings_and_logs_them(tmp_path: Path) -> None:
    options = jvm_options(tmp_path, 1024)
    assert {"-Xms1024m", "-Xmx1024m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35"} <= set(options)  # fmt: skip
    assert f"-Xlog:gc*:file={tmp_path / GC_LOG}:time,uptime,tags:filecount=10,filesize=100M" in options
    assert "-XX:TieredStopAtLevel=1" in options
    tuned = jvm_options(tmp_path, 1024, gc_pause_ms=200, full_jit=True)
    assert "-XX:MaxGCPauseMillis=200" in tuned and "-XX:TieredStopAtLevel=1" not in tuned


def test_the_first_seconds_split_into_tenths_of_the_records_due_in_them() -> None:
    due_s = np.array([0.01, 0.05, 0.15, 0.19, 1.95, 2.5])
    ms = np.array([10.0, 30.0, 5.0, 5.0, 7.0, 999.0])
    tenths = by_tenth(ms, due_s, until_s=2.0)
    assert [(t["from_s"], t["records"], t["max"]) for t in tenths] == [(0.0, 2, 30.0), (0.1, 2, 5.0), (1.9, 1, 7.0)]
