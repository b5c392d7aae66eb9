"""bench.profile_summary on a hand-made profile; what --consumer-config and --worker-tree do to the workers;
when the broker runs take the raw topic's end offsets; the revision a result names; perf on worker 0."""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import e2e_worker, worker_perf
from bench.profile_summary import summarise


def _profile() -> dict[str, Any]:
    frames = [
        {"name": "run", "file": "/x/worker.py", "line": 10},
        {"name": "consume", "file": "/x/kafka_io.py", "line": 20},
        {"name": "walk", "file": "/x/tree.py", "line": 5},
    ]
    main = {
        "name": 'Thread 1 "MainThread"',
        # run→consume twice, run→walk→walk (recursion: one sample counts once for walk), run alone
        "samples": [[0, 1], [0, 1], [0, 2, 2], [0]],
        "weights": [0.01, 0.01, 0.02, 0.01],
    }
    return {"shared": {"frames": frames}, "profiles": [main]}


def test_inclusive_time_counts_a_sample_once_per_function_and_leaves_by_line() -> None:
    (thread,) = summarise(_profile(), top=10)
    assert thread["thread"] == 'Thread 1 "MainThread"'
    assert thread["seconds"] == 0.05
    assert dict(thread["functions"]) == {"run (worker.py)": 0.05, "consume (kafka_io.py)": 0.02, "walk (tree.py)": 0.02}
    assert dict(thread["leaves"]) == {
        "consume (kafka_io.py:20)": 0.02,
        "walk (tree.py:5)": 0.02,
        "run (worker.py:10)": 0.01,
    }
    assert [name for name, _ in summarise(_profile(), top=1)[0]["functions"]] == ["run (worker.py)"]


def test_consumer_config_pairs_become_one_worker_option_each(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started: list[list[str]] = []

    class Popen:
        def __init__(self, command: list[str], **_: Any) -> None:
            started.append(command)

    monkeypatch.setattr("bench.e2e_worker.subprocess.Popen", Popen)
    p = argparse.ArgumentParser()
    e2e_worker.add_run_options(p, records=10, batch_records=10, batch_wait_ms=5)
    args = p.parse_args(
        ["--workers", "2", "--consumer-config", "max.partition.fetch.bytes=8388608 queued.min.messages=5"]
    )
    e2e_worker.start_workers(args, "raw", "typed", "dlq", tmp_path)
    for command in started:
        at = [i for i, arg in enumerate(command) if arg == "--consumer-config"]
        assert [command[i + 1] for i in at] == ["max.partition.fetch.bytes=8388608", "queued.min.messages=5"]
    assert len(started) == 2


def test_a_worker_tree_is_the_workers_directory_and_first_on_their_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started: list[dict[str, Any]] = []

    class Popen:
        def __init__(self, command: list[str], **kwargs: Any) -> None:
            started.append(kwargs)

    monkeypatch.setattr("bench.e2e_worker.subprocess.Popen", Popen)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    p = argparse.ArgumentParser()
    e2e_worker.add_run_options(p, records=10, batch_records=10, batch_wait_ms=5)
    e2e_worker.start_workers(p.parse_args(["--workers", "1"]), "raw", "typed", "dlq", tmp_path)
    e2e_worker.start_workers(p.parse_args(["--workers", "1", "--worker-tree", str(tmp_path)]), "r", "t", "d", tmp_path)
    assert "cwd" not in started[0] and "env" not in started[0]
    assert started[1]["cwd"] == str(tmp_path.resolve())
    assert started[1]["env"]["PYTHONPATH"] == f"{tmp_path.resolve()}:/elsewhere"


def test_end_offsets_are_waited_for_until_the_committed_load_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    # Just after a commit returns, a partition whose marker is not written yet ends at 0.
    answers = iter([{0: 0, 1: 0}, {0: 6, 1: 0}, {0: 6, 1: 5}])
    monkeypatch.setattr("bench.e2e_worker.end_offsets", lambda _kafka, _topic: next(answers))
    monkeypatch.setattr("bench.e2e_worker.time.sleep", lambda _s: None)
    ends = e2e_worker.visible_ends(None, "raw", records=9, markers=1, deadline=float("inf"))  # type: ignore[arg-type]
    assert ends == {("raw", 0): 6, ("raw", 1): 5}


def test_end_offsets_are_taken_as_they_are_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.e2e_worker.end_offsets", lambda _kafka, _topic: {0: 3})
    assert e2e_worker.visible_ends(None, "raw", records=9, markers=0, deadline=0.0) == {("raw", 0): 3}  # type: ignore[arg-type]


def test_a_run_from_a_changed_tree_is_recorded_as_dirty(tmp_path: Path) -> None:
    """The revision a result names: the commit, ``-dirty`` once a tracked file differs, None outside git."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "worker.py").write_text("a = 1\n")
    subprocess.run([*git, "add", "worker.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    assert e2e_worker._revision(str(tmp_path)) == commit
    (tmp_path / "notes.txt").write_text("untracked files do not count\n")
    assert e2e_worker._revision(str(tmp_path)) == commit
    (tmp_path / "worker.py").write_text("a = 2\n")
    assert e2e_worker._revision(str(tmp_path)) == f"{commit}-dirty"
    assert e2e_worker._revision(str(tmp_path / "not-a-checkout")) is None


def _fake_perf(tmp_path: Path) -> Path:
    """A stand-in for perf: ``record`` writes its arguments to the -o file, ``report`` prints them."""
    fake = tmp_path / "perf"
    fake.write_text('#!/bin/sh\nif [ "$1" = record ]; then\n  for a; do out=$a; done\n  echo "$@" > "$out"\n'
                    'else\n  echo "REPORT $*"\nfi\n')  # fmt: skip
    fake.chmod(0o755)
    return fake


def test_perf_records_worker_0_with_call_graphs_into_its_log_folder(tmp_path: Path) -> None:
    command = worker_perf.record_command("perf", 4242, tmp_path)
    assert command[:2] == ["perf", "record"]
    assert command[command.index("-p") + 1] == "4242"
    assert command[command.index("--call-graph") + 1].startswith("dwarf,")
    assert command[-2:] == ["-o", str(tmp_path / worker_perf.PERF_DATA)]
    recorder = worker_perf.start(str(_fake_perf(tmp_path)), 4242, tmp_path)
    assert recorder.wait(timeout=30) == 0
    assert (tmp_path / worker_perf.PERF_DATA).read_text().split() == command[1:]


def test_the_perf_report_holds_each_section_in_order(tmp_path: Path) -> None:
    path = worker_perf.report(str(_fake_perf(tmp_path)), tmp_path)
    lines = path.read_text().splitlines()
    data = str(tmp_path / worker_perf.PERF_DATA)
    expected = []
    for sort, graph in worker_perf.REPORTS:
        expected += [f"## perf report --sort {sort} -g {graph}",
                     f"REPORT report -i {data} --no-children --sort {sort} -g {graph} --stdio"]  # fmt: skip
    assert lines == expected


def test_a_result_names_the_native_library_the_workers_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its path and a checksum of its bytes, so two builds of one commit tell apart; None when absent."""
    package = tmp_path / "llmpipe_native"
    package.mkdir()
    (package / "__init__.py").write_text("")
    library = package / "llmpipe_native.abi3.so"
    library.write_bytes(b"one build")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "llmpipe_native", raising=False)
    expected = hashlib.sha256(b"one build").hexdigest()[:16]
    assert e2e_worker.native_library() == {"path": str(library), "sha256": expected}
    library.write_bytes(b"another build")
    assert e2e_worker.native_library()["sha256"] != expected  # type: ignore[index]
    library.unlink()
    assert e2e_worker.native_library() is None
