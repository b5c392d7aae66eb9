"""The worker's closing summary line is what ``bench.e2e_worker`` parses: keep the two in step."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.e2e_summary import STEPS, SUMMARY, by_thread, summaries
from gpu_stage.worker import Totals, Worker


def test_summary_line_parses(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    totals = Totals(records_in=1000, typed=990, dead=10, batches=4, aborts=1)
    totals.first_input_at, totals.last_commit_at = 1_700_000_000.25, 1_700_000_002.75
    totals.stage_seconds.update(collect=0.08, parse=0.01, produce=0.2, commit=1.0, wait=0.4, starved=0.06)
    totals.threads_at_first_input = {"main": 1.0, "rdk:broker": 0.5}
    totals.threads_sampled = (5.0, 800, {"main": 1.004, "rdk:broker": 0.5016, "parse": 0.0008})
    caplog.set_level(logging.INFO, logger="gpu_stage.worker")
    Worker._summary(SimpleNamespace(totals=totals, backend=SimpleNamespace(name="cpu")))  # type: ignore[arg-type]
    line = caplog.records[-1].getMessage()
    assert SUMMARY.findall(line) == [("1000", "990", "10", "4", "1", "1700000000.250", "1700000002.750", "400")]
    assert STEPS.findall(line) == [("20.0", "2.5", "50.0", "250.0", "100.0", "15.0")]
    (tmp_path / "worker-0.log").write_text("started\n" + line + "\n")
    parsed = summaries(tmp_path, 1)[0]
    steps = (parsed["collect_ms"], parsed["commit_ms"], parsed["wait_ms"], parsed["starved_ms"])
    assert (parsed["batches"], *steps) == (4.0, 20.0, 250.0, 100.0, 15.0)
    # A worker from before ``starved`` was a step: the other steps still parse.
    (tmp_path / "worker-0.log").write_text(line.replace(" starved=15.0", "") + "\n")
    older = summaries(tmp_path, 1)[0]
    assert older["wait_ms"] == 100.0 and "starved_ms" not in older
    # 4 ms of main-thread CPU over the 800 records of the sample is 5 µs a record; largest first.
    assert line.endswith("cpu_us_per_record_by_thread: main=5.00 rdk:broker=2.00 parse=1.00")
    assert (parsed["thread_us:main"], parsed["thread_us:parse"]) == (5.0, 1.0)
    assert "backend_ms_per_batch: - " in line and not any(k.startswith("backend_ms:") for k in parsed)


def test_a_gpu_workers_summary_tells_its_backends_stages(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """The backend's own clock (the GPU backend's stages) per committed batch, parsed per worker and averaged."""
    from bench.e2e_summary import mean_backend_stages
    from gpu_stage.transform.stages import StageClock

    totals = Totals(records_in=1000, typed=1000, batches=4)
    clock = StageClock(seconds={"lane_pack": 0.004, "lane_wait_pass1": 0.1})
    caplog.set_level(logging.INFO, logger="gpu_stage.worker")
    backend = SimpleNamespace(name="gpu", clock=clock)
    Worker._summary(SimpleNamespace(totals=totals, backend=backend))  # type: ignore[arg-type]
    line = caplog.records[-1].getMessage()
    assert "backend_ms_per_batch: lane_pack=1.0 lane_wait_pass1=25.0 cpu_us_per_record_by_thread:" in line
    for k, wait in enumerate((25.0, 35.0)):
        text = line.replace("lane_wait_pass1=25.0", f"lane_wait_pass1={wait}")
        (tmp_path / f"worker-{k}.log").write_text(text + "\n")
    per_worker = summaries(tmp_path, 2)
    assert [w["backend_ms:lane_wait_pass1"] for w in per_worker] == [25.0, 35.0]
    assert mean_backend_stages(per_worker) == {"lane_pack": 1.0, "lane_wait_pass1": 30.0}


def test_by_thread_weights_workers_by_their_records() -> None:
    workers = [
        {"in": 300.0, "thread_us:main": 6.0, "thread_us:parse": 1.0},
        {"in": 100.0, "thread_us:main": 2.0},
        {"in": 0.0, "thread_us:main": 50.0},
    ]
    assert by_thread(workers) == {"main": 5.0, "parse": 0.75}


def test_busy_rate_needs_both_ends() -> None:
    totals = Totals(records_in=500)
    assert totals.busy_rate() == 0.0
    totals.first_input_at, totals.last_commit_at = 10.0, 12.0
    assert totals.busy_rate() == 250.0


def _latency(p50: float, p99: float, first_p99: float, settled_p99: float) -> dict[str, object]:
    return {
        "latency_ms": {"p50": p50, "p99": p99},
        "latency_ms_by_second": [{"second": 0, "p99": first_p99}, {"second": 1, "p99": p99}],
        "latency_ms_after_settle": {"p50": p50, "p99": settled_p99},
    }


def test_warm_up_pair_ratios_are_warmed_over_cold() -> None:
    from bench.e2e_latency import WARM_UP_PAIR, _warm_up_pair

    assert WARM_UP_PAIR == (0, -1)  # the baseline turns the warm-up off; the other run takes the default
    ratios = _warm_up_pair(_latency(40, 200, 400, 80), _latency(30, 100, 100, 80))
    assert ratios == {
        "p50_to_baseline": 0.75, "p99_to_baseline": 0.5, "first_second_p99_to_baseline": 0.25,
        "p50_after_settle_to_baseline": 0.75, "p99_after_settle_to_baseline": 1.0,
    }  # fmt: skip


def test_the_warm_up_option_reaches_the_workers_only_when_set(tmp_path: Path) -> None:
    import argparse
    from unittest import mock

    from bench import e2e_worker

    p = argparse.ArgumentParser()
    e2e_worker.add_run_options(p, records=10, batch_records=5, batch_wait_ms=1)
    for argv, expected in (([], None), (["--warm-up-records", "0"], "0"), (["--warm-up-records", "300"], "300")):
        with mock.patch.object(e2e_worker.subprocess, "Popen") as popen:
            e2e_worker.start_workers(p.parse_args(["--workers", "1", *argv]), "raw", "typed", "dlq", tmp_path)
        command = popen.call_args.args[0]
        given = command[command.index("--warm-up-records") + 1] if "--warm-up-records" in command else None
        assert given == expected


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], {"--gpu-min-batch": None, "--compression": "lz4", "--partition-by": "source", "--fetch-backoff-ms": None}),
        (
            ["--gpu-min-batch", "0", "--compression", "none", "--partition-by", "key", "--fetch-backoff-ms", "0"],
            {"--gpu-min-batch": "0", "--compression": "none", "--partition-by": "key", "--fetch-backoff-ms": "0"},
        ),
        ([], {"--lane-order": None, "--device-wait": None}),
        (["--lane-order", "warp", "--device-wait", "poll"], {"--lane-order": "warp", "--device-wait": "poll"}),
    ],
)
def test_the_run_options_reach_the_workers(tmp_path: Path, argv: list[str], expected: dict[str, str | None]) -> None:
    import argparse
    from unittest import mock

    from bench import e2e_worker

    p = argparse.ArgumentParser()
    e2e_worker.add_run_options(p, records=10, batch_records=5, batch_wait_ms=1)
    with mock.patch.object(e2e_worker.subprocess, "Popen") as popen:
        e2e_worker.start_workers(p.parse_args(["--workers", "1", *argv]), "raw", "typed", "dlq", tmp_path)
    command = popen.call_args.args[0]
    assert {flag: command[command.index(flag) + 1] if flag in command else None for flag in expected} == expected


def test_the_summary_gives_each_workers_cpu_and_the_run_weighs_them_by_records(tmp_path: Path) -> None:
    from bench.e2e_summary import cpu_figures
    from bench.machine import CpuWindow

    lines = [
        "summary: in=3000 typed=3000 dlq=0 batches=3 aborts=0 first_input_at=1.000 last_commit_at=2.000 "
        "busy_rate=3000 rec/s backend=cpu busy_cpu=10.00 us/rec per_batch_ms: collect=1.0 parse=1.0 produce=1.0 "
        "commit=1.0 wait=0.0 cpu_us_per_record_by_thread: main=8.00 rdk:broker=2.00",
        "summary: in=1000 typed=1000 dlq=0 batches=1 aborts=0 first_input_at=1.000 last_commit_at=2.000 "
        "busy_rate=1000 rec/s backend=cpu busy_cpu=30.00 us/rec per_batch_ms: collect=1.0 parse=1.0 produce=1.0 "
        "commit=1.0 wait=0.0",
    ]
    for k, line in enumerate(lines):
        (tmp_path / f"worker-{k}.log").write_text(line + "\n")
    per_worker = summaries(tmp_path, 2)
    assert [w["cpu_us_per_record"] for w in per_worker] == [10.0, 30.0]
    window = CpuWindow()
    window.process_seconds, window.busy_cores = 0.02, 3.5
    assert cpu_figures(window, per_worker, 4000) == {
        "host_busy_cores": 3.5, "broker_cpu_us_per_record": 5.0, "workers_cpu_us_per_record": 15.0,
        # the second worker's line has no breakdown: it is left out of the weighting
        "workers_cpu_us_per_record_by_thread": {"main": 8.0, "rdk:broker": 2.0},
    }  # fmt: skip
    assert cpu_figures(CpuWindow(), per_worker[:0], 4000)["broker_cpu_us_per_record"] is None


def test_a_cpu_window_counts_a_process_and_the_host() -> None:
    import os
    import time

    from bench.machine import CpuWindow

    window = CpuWindow(os.getpid())
    window.start()
    until = time.process_time() + 0.2
    while time.process_time() < until:
        pass
    window.stop()
    assert window.process_seconds is not None and 0.15 <= window.process_seconds <= 5
    assert window.busy_cores is not None and window.busy_cores > 0.5
    gone = CpuWindow(2**22 + 7)  # no such process: no figure, no error
    gone.start()
    gone.stop()
    assert gone.process_seconds is None


def test_a_fetch_backoff_pair_names_the_setting_it_changed(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.e2e_worker import COST_PAIRS, cost_ratios

    assert COST_PAIRS["fetch_backoff_ms"] == (1000, 10)
    base = {"fetch_backoff_ms": 1000, "records_per_s": 800.0, "workers_cpu_us_per_record": 12.0}
    new = {"fetch_backoff_ms": 10, "records_per_s": 1000.0, "workers_cpu_us_per_record": 12.0}
    assert cost_ratios(base, new) == {"rate_ratio": 1.25, "workers_cpu_ratio": 1.0}
    assert capsys.readouterr().out.startswith("fetch_backoff_ms 10 / 1000: ")
    assert (COST_PAIRS["lane_order"], COST_PAIRS["device_wait"]) == (("arrival", "balanced"), ("driver", "block"))
    arrival = {"lane_order": "arrival", "records_per_s": 4.0}
    balanced = {"lane_order": "balanced", "records_per_s": 5.0}
    assert cost_ratios(arrival, balanced) == {"rate_ratio": 1.25}
    assert capsys.readouterr().out.startswith("lane_order balanced / arrival: ")


def test_unwritten_page_cache_is_read_from_meminfo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from bench import machine

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 131072 kB\nDirty: 3072 kB\nWriteback: 1024 kB\nHugePages_Total: 0\n")
    real_path = machine.Path
    monkeypatch.setattr(machine, "Path", lambda name: meminfo if name == "/proc/meminfo" else real_path(name))
    assert machine.unwritten_mb() == 4.0
    meminfo.write_text("MemTotal:       131072 kB\n")
    assert machine.unwritten_mb() is None
    assert machine.write_back() >= 0.0


def test_the_step_means_skip_workers_without_a_step() -> None:
    from bench.e2e_summary import mean_steps

    per_worker = [{"collect_ms": 100.0, "starved_ms": 10.0, "in": 5.0}, {"collect_ms": 130.0}]
    assert mean_steps(per_worker) == {"collect": 115.0, "starved": 10.0}
    assert mean_steps([]) == {}


def test_each_cost_pair_has_its_compare_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--compare-lane-order N`` and the rest: N pairs of runs of that option, and nothing else run."""
    from bench import e2e_worker

    asked: list[tuple[str, int]] = []
    monkeypatch.setattr(
        e2e_worker, "compare_costs", lambda _args, option, rounds, pair=None: asked.append((option, rounds)) or 0
    )
    flags = ["--compare-compression", "--compare-partition-by", "--compare-fetch-backoff", "--compare-lane-order",
             "--compare-device-wait", "--compare-kafka-reader", "--compare-kafka-writer",
             "--compare-load-write-back"]  # fmt: skip
    for flag in flags:
        assert e2e_worker.main([flag, "2"]) == 0
    assert asked == [(option, 2) for option in e2e_worker.COST_PAIRS]


def test_the_result_keeps_the_lane_settings_the_workers_take_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Workers inherit ``GPU_STAGE_*``: the lane's settings among them go into the result, nothing else."""
    import argparse

    from bench import e2e_worker

    p = argparse.ArgumentParser()
    e2e_worker.add_run_options(p, records=10, batch_records=5, batch_wait_ms=1)
    monkeypatch.setenv("GPU_STAGE_LANE_REGISTERS", "96")
    monkeypatch.setenv("GPU_STAGE_PRODUCER_CONFIG", "sasl.password=secret")
    monkeypatch.delenv("GPU_STAGE_LANE_ORDER", raising=False)
    check = {"missing": 0, "duplicates": 0, "unexpected": 0}
    result = e2e_worker.common_result(p.parse_args([]), [0], [], check)
    assert result["lane_env"] == {"GPU_STAGE_LANE_REGISTERS": "96"}
    assert "secret" not in str(result)


def test_a_gpu_run_names_the_gpu_it_ran_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's name says nothing of its GPU; a ``--backend gpu`` result carries ``nvidia-smi``'s line."""
    import argparse

    from bench import e2e_worker

    p = argparse.ArgumentParser()
    e2e_worker.add_run_options(p, records=10, batch_records=5, batch_wait_ms=1)
    monkeypatch.setattr(e2e_worker, "gpu_name", lambda: "NVIDIA H200, 143771 MiB, 580.159.04")
    check = {"missing": 0, "duplicates": 0, "unexpected": 0}
    assert e2e_worker.common_result(p.parse_args(["--backend", "gpu"]), [0], [], check)["gpu"].startswith("NVIDIA H200")
    assert e2e_worker.common_result(p.parse_args(["--backend", "cpu"]), [0], [], check)["gpu"] is None
