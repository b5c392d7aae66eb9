"""The jobs on a standalone Flink cluster started from the PyFlink wheel's distribution (``stack.flink``).

Submitted with ``flink run`` / ``python -m jobs.submit`` (not the embedded mini-cluster): detached and
idempotent submission, a cancelled attached run that ends with one INFO line, an upgrade through a
savepoint that keeps the open windows' records, and a TaskManager killed mid-stream without doubled
features under the exactly-once sink (and the duplicates at-least-once can leave, for contrast).

Every expected window is recomputed here from the produced records, which are written in event-time
order and never late, so the reference is a plain grouping.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs.submit import job_name, stage_packages
from llmpipe.kafka_io import KafkaSettings, read_topic
from stack import flink
from tests.integration.jobs.jobs_testlib import MINUTE, at, epoch_ms, produce_typed, typed_row

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
MODELS = ("m-a", "m-b")
Key = tuple[str, int]
"""(model, window_start epoch ms): one feature row."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[flink.FlinkDir]:
    """A JobManager and one TaskManager (2 slots) for this module's tests."""
    root = tmp_path_factory.mktemp("flink")
    run = flink.start(root, slots=2)
    try:
        yield run
    finally:
        flink.stop(root)


@pytest.fixture
def no_jobs_left(cluster: flink.FlinkDir) -> Iterator[None]:
    """Cancel whatever a test left running, so the next one has the slots."""
    yield
    for job in flink.rest_get(cluster.rest_url(), "/jobs/overview")["jobs"]:
        if job["state"] not in {"FINISHED", "CANCELED", "FAILED"}:
            _cancel(cluster, job["jid"])


def _cancel(cluster: flink.FlinkDir, job_id: str) -> None:
    subprocess.run(["curl", "-sf", "-X", "PATCH", f"{cluster.rest_url()}/jobs/{job_id}?mode=cancel"],
                   check=False, capture_output=True)
    flink.wait_for(lambda: _state(cluster, job_id) in {"CANCELED", "FAILED", "FINISHED"}, 60, f"{job_id} to end")


def _state(cluster: flink.FlinkDir, job_id: str) -> str:
    return str(flink.rest_get(cluster.rest_url(), f"/jobs/{job_id}")["state"])


# -- records and the reference ------------------------------------------------------------------------------


def minute_rows(first: int, last: int, per_minute: int = 6, tag: str = "r") -> list[dict[str, Any]]:
    """Records every ``60 / per_minute`` seconds of minutes ``first..last``, models alternating, in order."""
    rows = []
    step = 60 // per_minute
    for minute in range(first, last + 1):
        for i in range(per_minute):
            n = len(rows)
            rows.append(typed_row(
                request_id=f"{tag}-{minute}-{i}", created=at(minute, i * step), model=MODELS[n % 2],
                prompt_tokens=10 + i, completion_tokens=20 + minute, total_tokens=30 + minute + i,
                latency_ms=100 * (i + 1), finish_reason="stop", content_valid=True,
            ))
    return rows


def reference(rows: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """Per (model, window_start): the columns recomputed from ``rows`` (none is late: created is in order)."""
    groups: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["model"], row["created"] - row["created"] % MINUTE)].append(row)
    return {key: {"requests": len(rs), "prompt_tokens": sum(r["prompt_tokens"] for r in rs),
                  "completion_tokens": sum(r["completion_tokens"] for r in rs),
                  "total_tokens": sum(r["total_tokens"] for r in rs),
                  "latency_ms_max": max(r["latency_ms"] for r in rs)}
            for key, rs in groups.items()}


def closed(want: dict[Key, dict[str, Any]], before_minute: int) -> dict[Key, dict[str, Any]]:
    """The reference windows that start before ``before_minute`` (the ones the watermark has closed)."""
    return {key: value for key, value in want.items() if key[1] < at(before_minute, 0)}


def features(kafka: KafkaSettings, topic: str, isolation: str = "read_committed") -> list[tuple[Key, dict[str, Any]]]:
    """Every feature row of ``topic`` as ((model, window_start), columns), as a reader with ``isolation`` sees it."""
    out = []
    for message in read_topic(kafka, topic, isolation=isolation, timeout_s=30):
        value = json.loads(message.value or b"null")
        out.append(((value["model"], epoch_ms(value["window_start"])), value))
    return out


def await_windows(kafka: KafkaSettings, topic: str, keys: set[Key], timeout_s: float = 120,
                  isolation: str = "read_committed") -> list[tuple[Key, dict[str, Any]]]:
    """Poll the features topic until every key in ``keys`` has been written."""
    def seen() -> list[tuple[Key, dict[str, Any]]] | None:
        rows = features(kafka, topic, isolation)
        return rows if keys <= {key for key, _ in rows} else None

    found: list[tuple[Key, dict[str, Any]]] = flink.wait_for(seen, timeout_s, f"windows {sorted(keys)} in {topic}",
                                                             interval_s=0.2)
    return found


def assert_once_and_equal(rows: list[tuple[Key, dict[str, Any]]], want: dict[Key, dict[str, Any]]) -> None:
    """Each window exactly once, and equal to its recomputation."""
    counts = Counter(key for key, _ in rows)
    doubled = {key: n for key, n in counts.items() if n > 1}
    assert not doubled, f"windows written more than once: {doubled}"
    assert set(counts) == set(want)
    for key, value in rows:
        got = {column: value[column] for column in want[key]}
        assert got == want[key], key


# -- submitting ---------------------------------------------------------------------------------------------


def job_options(kafka: KafkaSettings, typed: str, features_topic: str, *, guarantee: str = "exactly-once",
                checkpoint_ms: int = 2000) -> list[str]:
    """Streaming model_minute options: from the start of the topic, 5 s watermark delay, no early idleness."""
    return ["--bootstrap", kafka.bootstrap, "--typed-topic", typed, "--features-topic", features_topic,
            "--from", "earliest", "--group-id", f"g-{typed}", "--no-jars", "--watermark-delay", "5",
            "--idle-timeout", "600", "--checkpoint-interval-ms", str(checkpoint_ms), "--sink-guarantee", guarantee]


def submit(cluster: flink.FlinkDir, *args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    """``python -m jobs.submit --rest-url <cluster> ARGS`` with the cluster's lib/ (connector jars) for the CLI."""
    return subprocess.run([sys.executable, "-m", "jobs.submit", "--rest-url", cluster.rest_url(), *args],
                          env=cluster.env(), cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
                          check=False)


def jobs_named(cluster: flink.FlinkDir, name: str) -> list[dict[str, Any]]:
    return [job for job in flink.rest_get(cluster.rest_url(), "/jobs/overview")["jobs"] if job["name"] == name]


def running_job(cluster: flink.FlinkDir, name: str) -> str:
    running = [job["jid"] for job in jobs_named(cluster, name) if job["state"] == "RUNNING"]
    assert len(running) == 1, jobs_named(cluster, name)
    return str(running[0])


def checkpoints(cluster: flink.FlinkDir, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = flink.rest_get(cluster.rest_url(), f"/jobs/{job_id}/checkpoints")
    return found


def completed_checkpoints(cluster: flink.FlinkDir, job_id: str) -> int:
    return int(checkpoints(cluster, job_id)["counts"]["completed"])


def tasks_running(cluster: flink.FlinkDir, job_id: str) -> bool:
    job = flink.rest_get(cluster.rest_url(), f"/jobs/{job_id}")
    return job["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in job["vertices"])


# -- tests --------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_jobs_left")
def test_flink_run_on_the_cluster_equals_the_reference(cluster: flink.FlinkDir, kafka: KafkaSettings,
                                                       new_topic: Callable[..., str], tmp_path: Path) -> None:
    """Plain ``flink run`` (attached, bounded) of model_minute on the standalone cluster."""
    typed, out = new_topic("typed"), new_topic("features")
    rows = minute_rows(0, 3)
    produce_typed(kafka, typed, rows)
    pyfs = stage_packages(tmp_path / "pyfs")
    command = [str(flink.flink_cli()), "run", "-m", cluster.jobmanager_address(), "-pyclientexec", sys.executable,
               "-pym", "jobs.model_minute", "-pyfs", str(pyfs), "--",
               *job_options(kafka, typed, out), "--until", "latest"]
    started = time.monotonic()
    done = subprocess.run(command, env=cluster.env(), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    # Bounded: the end of input closes every window, the last one included.
    assert_once_and_equal(features(kafka, out), reference(rows))
    assert jobs_named(cluster, job_name("model_minute"))[-1]["state"] == "FINISHED"
    print(f"flink run (bounded, 4 minutes of records): {time.monotonic() - started:.1f}s")


@pytest.mark.usefixtures("no_jobs_left")
def test_submit_is_detached_and_idempotent(cluster: flink.FlinkDir, kafka: KafkaSettings,
                                           new_topic: Callable[..., str]) -> None:
    typed, out = new_topic("typed"), new_topic("features")
    options = ["model_minute", "--", *job_options(kafka, typed, out)]
    first = submit(cluster, *options)
    assert first.returncode == 0, first.stderr
    assert "is running as job" in first.stderr
    again = submit(cluster, *options)
    assert again.returncode == 0, again.stderr
    assert "already on the cluster" in again.stderr
    active = [job["state"] for job in jobs_named(cluster, job_name("model_minute"))
              if job["state"] not in {"FINISHED", "CANCELED", "FAILED"}]
    assert active == ["RUNNING"]


@pytest.mark.usefixtures("no_jobs_left")
def test_cancelled_attached_run_ends_with_one_info_line(cluster: flink.FlinkDir, kafka: KafkaSettings,
                                                        new_topic: Callable[..., str], tmp_path: Path) -> None:
    typed, out = new_topic("typed"), new_topic("features")
    pyfs = stage_packages(tmp_path / "pyfs")
    command = [str(flink.flink_cli()), "run", "-m", cluster.jobmanager_address(), "-pyclientexec", sys.executable,
               "-pym", "jobs.model_minute", "-pyfs", str(pyfs), "--", *job_options(kafka, typed, out)]
    with subprocess.Popen(command, env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as client:
        name = job_name("model_minute")
        job_id = flink.wait_for(lambda: next((j["jid"] for j in jobs_named(cluster, name)
                                              if j["state"] == "RUNNING"), None), 120, "the job to run")
        flink.wait_for(lambda: tasks_running(cluster, job_id), 60, "the tasks to run")
        _cancel(cluster, job_id)
        output, _ = client.communicate(timeout=60)
    assert client.returncode == 0, output
    assert f"job {job_id} was cancelled" in output
    assert "ERROR" not in output, output
    assert "Exception" not in output, output


@pytest.mark.usefixtures("no_jobs_left")
def test_upgrade_through_a_savepoint_keeps_the_open_windows(cluster: flink.FlinkDir, kafka: KafkaSettings,
                                                            new_topic: Callable[..., str],
                                                            tmp_path: Path) -> None:
    typed, out = new_topic("typed"), new_topic("features")
    options = job_options(kafka, typed, out)
    name = job_name("model_minute")
    before = minute_rows(0, 2, tag="a")  # closes minutes 0 and 1; minute 2 stays open
    produce_typed(kafka, typed, before)
    assert submit(cluster, "model_minute", "--", *options).returncode == 0
    await_windows(kafka, out, set(closed(reference(before), 2)))
    first_id = running_job(cluster, name)

    stopped = submit(cluster, "stop", "--savepoint-dir", str(tmp_path / "savepoints"), "model_minute")
    assert stopped.returncode == 0, stopped.stderr
    job, savepoint = stopped.stdout.split()
    assert job == "model_minute"
    assert _state(cluster, first_id) == "FINISHED"

    after = [typed_row(request_id="b-2-55", created=at(2, 55), model="m-a", prompt_tokens=1, completion_tokens=2,
                       total_tokens=3, latency_ms=50, finish_reason="stop", content_valid=True),
             *minute_rows(3, 4, tag="b")]  # one more record for the open minute 2, then close minutes 2 and 3
    produce_typed(kafka, typed, after)
    resumed = submit(cluster, "--savepoint", savepoint, "model_minute", "--", *options)
    assert resumed.returncode == 0, resumed.stderr

    want = closed(reference(before + after), 4)
    assert_once_and_equal(await_windows(kafka, out, set(want)), want)
    second_id = running_job(cluster, name)
    assert second_id != first_id
    assert checkpoints(cluster, second_id)["latest"]["restored"]["is_savepoint"] is True


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
@pytest.mark.usefixtures("no_jobs_left")
def test_taskmanager_killed_mid_stream(cluster: flink.FlinkDir, kafka: KafkaSettings,
                                       new_topic: Callable[..., str], guarantee: str) -> None:
    """Kill the TaskManager after windows were emitted but before the checkpoint that covers them.

    The job restarts from the previous checkpoint and emits those windows again. Exactly-once: the first
    emission was in a transaction the kill aborted, so a read_committed reader sees each window once.
    At-least-once: the first emission was already visible, so the topic holds those windows twice.
    """
    typed, out = new_topic("typed"), new_topic("features")
    checkpoint_ms = 6000
    assert submit(cluster, "model_minute", "--", *job_options(kafka, typed, out, guarantee=guarantee,
                                                               checkpoint_ms=checkpoint_ms)).returncode == 0
    job_id = running_job(cluster, job_name("model_minute"))
    flink.wait_for(lambda: tasks_running(cluster, job_id), 60, "the tasks to run")
    first = minute_rows(0, 2, tag="a")
    produce_typed(kafka, typed, first)
    await_windows(kafka, out, set(closed(reference(first), 2)))  # committed: at least one checkpoint done

    # Right after a checkpoint completes, emit two more windows and kill before the next one.
    done = completed_checkpoints(cluster, job_id)
    flink.wait_for(lambda: completed_checkpoints(cluster, job_id) > done, 30, "a checkpoint", interval_s=0.1)
    before_kill = int(checkpoints(cluster, job_id)["latest"]["completed"]["id"])
    second = minute_rows(3, 4, tag="b")
    produce_typed(kafka, typed, second)
    await_windows(kafka, out, set(closed(reference(first + second), 4)), isolation="read_uncommitted")
    killed = flink.kill_taskmanager(cluster.root)
    assert killed not in cluster.taskmanager_pids()
    flink.start_taskmanager(cluster.root)
    flink.wait_for(lambda: tasks_running(cluster, job_id), 120, "the job to recover")
    restored = flink.wait_for(lambda: (checkpoints(cluster, job_id)["latest"].get("restored") or {}).get("id"),
                              60, "the restore")

    third = minute_rows(5, 6, tag="c")
    produce_typed(kafka, typed, third)
    want = closed(reference(first + second + third), 6)
    rows = await_windows(kafka, out, set(want))
    doubled = {key: n for key, n in Counter(key for key, _ in rows).items() if n > 1}
    uncommitted = Counter(key for key, _ in features(kafka, out, "read_uncommitted"))
    print(f"{guarantee}: killed TaskManager {killed}; last checkpoint before the kill {before_kill}, "
          f"restored {restored}; windows read_committed twice: {len(doubled)}, "
          f"read_uncommitted twice: {sum(n > 1 for n in uncommitted.values())}")
    if guarantee == "exactly-once":
        assert_once_and_equal(rows, want)
    elif restored == before_kill:
        # The restored checkpoint precedes the second batch: the windows it closed (minutes 2 and 3) were
        # written, then written again after the restart.
        assert set(doubled) == {key for key in want if at(2, 0) <= key[1] < at(4, 0)}
        latest = {key: value for key, value in rows}
        for key, value in want.items():
            assert {column: latest[key][column] for column in value} == value, key


def _default_sigint() -> None:
    """In the client: SIGINT as a terminal delivers it, even where the tests run with it ignored.

    A test run started in the background by a non-interactive shell inherits SIGINT ignored, and Python
    then installs no KeyboardInterrupt handler: the ctrl-C this test sends would do nothing.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_of_an_embedded_run_cancels_the_job_with_one_info_line(kafka: KafkaSettings,
                                                                    new_topic: Callable[..., str]) -> None:
    """On the embedded mini-cluster, SIGINT while the client waits: the job is cancelled, exit 130, no trace."""
    typed, out = new_topic("typed"), new_topic("features")
    options = [option for option in job_options(kafka, typed, out) if option != "--no-jars"]
    with subprocess.Popen([sys.executable, "-m", "jobs.model_minute", *options], cwd=REPO, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_default_sigint) as client:
        assert client.stdout is not None
        lines = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = client.stdout.readline()
            lines.append(line)
            if "waiting for it to end" in line or not line:
                break
        try:
            assert "waiting for it to end" in lines[-1], "".join(lines)
            client.send_signal(signal.SIGINT)
            rest, _ = client.communicate(timeout=120)
        finally:
            if client.poll() is None:  # a failed check above: do not leave the client and its JVM behind
                client.kill()
    output = "".join(lines) + rest
    assert client.returncode == 130, output
    assert "interrupted: cancelled job" in output
    assert "ERROR" not in output, output
    assert "Traceback" not in output, output
