"""``python -m jobs.submit`` against a fake REST API and a fake ``flink`` CLI: no JVM, no broker."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jobs import submit

FAKE_FLINK = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_FLINK_ARGS"
exit "${FAKE_FLINK_RC:-0}"
"""


class FakeCluster:
    """What the fake JobManager answers: jobs by state, and the calls it received."""

    def __init__(self, submitted_marker: Path) -> None:
        self.jobs: list[dict[str, Any]] = []
        self.after_submit: list[dict[str, Any]] = []
        self.submitted_marker = submitted_marker
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.savepoint: dict[str, Any] = {"status": {"id": "COMPLETED"},
                                          "operation": {"location": "file:/sp/savepoint-1"}}

    def overview(self) -> dict[str, Any]:
        jobs = self.after_submit if self.submitted_marker.exists() and self.after_submit else self.jobs
        return {"jobs": jobs}


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeCluster, str]]:
    """(cluster state, REST URL) of a fake JobManager; ``flink`` is a script that records its arguments."""
    args_file = tmp_path / "flink-args"
    state = FakeCluster(args_file)

    class Handler(BaseHTTPRequestHandler):
        def _send(self, body: Any, code: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/jobs/overview":
                self._send(state.overview())
            elif "/savepoints/" in self.path:
                self._send(state.savepoint)
            else:
                self._send({"errors": ["not found"]}, 404)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.posts.append((self.path, body))
            self._send({"request-id": "trigger-1"}, 202)

        def log_message(self, *args: Any) -> None:
            del args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    flink = tmp_path / "flink"
    flink.write_text(FAKE_FLINK)
    flink.chmod(0o755)
    monkeypatch.setenv("FAKE_FLINK_ARGS", str(args_file))
    monkeypatch.setenv("JOBS_FLINK_CLI", str(flink))
    monkeypatch.delenv("JOBS_REST_URL", raising=False)
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def running(name: str, jid: str = "j1", state: str = "RUNNING", start: int = 1) -> dict[str, Any]:
    return {"jid": jid, "name": name, "state": state, "start-time": start}


def flink_args(state: FakeCluster) -> list[str]:
    return state.submitted_marker.read_text().splitlines() if state.submitted_marker.exists() else []


@pytest.mark.parametrize(("argv", "names"), [
    (["model_minute"], "--rest-url"),
    (["--rest-url", "ftp://x:1", "model_minute"], "--rest-url"),
    (["--rest-url", "http://x:99999", "model_minute"], "--rest-url"),
    (["--rest-url", "http://x:8081", "nope"], "JOB"),
    (["--rest-url", "http://x:8081", "stop"], "JOB"),
    (["--rest-url", "http://x:8081", "-s", "/tmp", "model_minute", "user_risk"], "--savepoint"),
    (["--rest-url", "http://x:8081", "-s", "/no/such/savepoint", "model_minute"], "--savepoint"),
    (["--rest-url", "http://x:8081", "stop", "model_minute"], "--savepoint-dir"),
    (["--rest-url", "http://x:8081", "stop", "--savepoint-dir", "/sp", "-s", "/tmp", "model_minute"], "--savepoint"),
    (["--rest-url", "http://x:8081", "stop", "--savepoint-dir", "/sp", "model_minute", "--", "--x"], "--"),
    (["--rest-url", "http://x:8081", "--drain", "model_minute"], "--drain"),
    (["--rest-url", "http://x:8081", "--flink", "/no/such/flink", "model_minute"], "--flink"),
    (["--rest-url", "http://x:8081", "--pyfs", "/no/such/dir", "model_minute"], "--pyfs"),
    (["--rest-url", "http://x:8081", "--timeout", "0", "model_minute"], "--timeout"),
])
def test_bad_options_exit_2_with_one_line_naming_the_option(
    argv: list[str], names: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JOBS_REST_URL", raising=False)
    assert submit.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert names in err[0]


def test_rest_url_falls_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBS_REST_URL", "http://jobmanager:8081/")
    request = submit.request_from_args(["model_minute", "user_risk", "--", "--from", "group"])
    assert request.rest_url == "http://jobmanager:8081"
    assert request.address == "jobmanager:8081"
    assert request.jobs == ("model_minute", "user_risk")
    assert request.job_args == ("--from", "group")


def test_a_running_job_is_not_submitted_again(fake: tuple[FakeCluster, str],
                                              caplog: pytest.LogCaptureFixture) -> None:
    state, url = fake
    state.jobs = [running("llmpipe.model_minute", state="RESTARTING")]
    with caplog.at_level(logging.INFO):
        assert submit.main(["--rest-url", url, "model_minute"]) == 0
    assert flink_args(state) == []
    assert "already on the cluster as job j1 (RESTARTING)" in caplog.text


def test_a_missing_job_is_submitted_detached_and_confirmed(fake: tuple[FakeCluster, str], tmp_path: Path) -> None:
    state, url = fake
    state.jobs = [running("llmpipe.model_minute", state="CANCELED"), running("llmpipe.other")]
    state.after_submit = [*state.jobs, running("llmpipe.model_minute", jid="j2", start=2)]
    savepoint = tmp_path / "savepoint-1"
    savepoint.mkdir()
    argv = ["--rest-url", url, "--pyfs", str(tmp_path), "--python", sys.executable, "-s", str(savepoint),
            "model_minute", "--", "--bootstrap", "kafka:9092", "--parallelism", "2"]
    assert submit.main(argv) == 0
    host_port = url.removeprefix("http://")
    assert flink_args(state) == ["run", "--detached", "-m", host_port, "-pyclientexec", sys.executable,
                                 "-pym", "jobs.model_minute", "-pyfs", str(tmp_path), "-s", str(savepoint),
                                 "--", "--bootstrap", "kafka:9092", "--parallelism", "2"]


def test_the_packages_are_staged_for_pyfs_by_default(fake: tuple[FakeCluster, str]) -> None:
    state, url = fake
    state.after_submit = [running("llmpipe.user_risk")]
    assert submit.main(["--rest-url", url, "user_risk"]) == 0
    args = flink_args(state)
    pyfs = args[args.index("-pyfs") + 1]
    assert Path(pyfs).name.startswith("llmpipe-pyfs-")
    assert not Path(pyfs).exists()  # removed once submitted


def test_a_failing_flink_run_exits_1(fake: tuple[FakeCluster, str], monkeypatch: pytest.MonkeyPatch,
                                     caplog: pytest.LogCaptureFixture) -> None:
    _state, url = fake
    monkeypatch.setenv("FAKE_FLINK_RC", "1")
    assert submit.main(["--rest-url", url, "--pyfs", ".", "ab_arm"]) == 1
    assert "flink run exited with 1" in caplog.text


def test_a_job_that_fails_after_submission_exits_1(fake: tuple[FakeCluster, str],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    state, url = fake
    state.after_submit = [running("llmpipe.ab_arm", state="FAILED")]
    assert submit.main(["--rest-url", url, "--pyfs", ".", "ab_arm"]) == 1
    assert "is FAILED" in caplog.text


def test_an_unreachable_cluster_exits_1(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    flink = tmp_path / "flink"
    flink.write_text(FAKE_FLINK)
    flink.chmod(0o755)
    monkeypatch.setenv("JOBS_FLINK_CLI", str(flink))
    assert submit.main(["--rest-url", "http://127.0.0.1:9", "--pyfs", ".", "model_minute"]) == 1
    assert "/jobs/overview" in caplog.text


def test_stop_takes_a_savepoint_and_prints_where(fake: tuple[FakeCluster, str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    state, url = fake
    state.jobs = [running("llmpipe.model_minute", jid="abc")]
    assert submit.main(["--rest-url", url, "stop", "--savepoint-dir", "/savepoints", "model_minute"]) == 0
    assert state.posts == [("/jobs/abc/stop", {"targetDirectory": "/savepoints", "drain": False})]
    assert capsys.readouterr().out == "model_minute file:/sp/savepoint-1\n"


def test_stop_of_a_job_that_is_not_running_exits_1(fake: tuple[FakeCluster, str]) -> None:
    state, url = fake
    assert submit.main(["--rest-url", url, "stop", "--savepoint-dir", "/sp", "model_minute"]) == 1
    assert state.posts == []


def test_a_failed_savepoint_exits_1(fake: tuple[FakeCluster, str], caplog: pytest.LogCaptureFixture) -> None:
    state, url = fake
    state.jobs = [running("llmpipe.model_minute")]
    state.savepoint = {"status": {"id": "COMPLETED"},
                       "operation": {"failure-cause": {"serialized-throwable": "disk full"}}}
    assert submit.main(["--rest-url", url, "stop", "--savepoint-dir", "/sp", "model_minute"]) == 1
    assert "disk full" in caplog.text


def test_submit_imports_without_confluent_kafka_or_pyflink() -> None:
    code = ("import sys; sys.modules['confluent_kafka'] = None; sys.modules['pyflink'] = None; "
            "import runpy; sys.argv = ['jobs.submit', '--help']; runpy.run_module('jobs.submit', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--rest-url" in done.stdout
