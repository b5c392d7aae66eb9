"""Each start-up failure of connector, replay and jobs is one clear line naming what failed, in bounded
time, with a nonzero exit and no traceback (real broker, real subprocesses)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from llmpipe.dlq import BadRecord, Reason
from llmpipe.kafka_io import KafkaSettings, Producer
from stack.procs import free_port
from tests.conftest import SASL_USER
from tests.integration.connector.harness import simulator

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
WRONG_PASSWORD = "definitely-not-it"


def _run(*args: str, timeout_s: float = 90) -> tuple[int, list[str], float]:
    """Exit code, the output's ERROR lines (stdout and stderr), seconds taken; no traceback allowed."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                          check=False)  # fmt: skip
    text = done.stdout + done.stderr
    assert "Traceback" not in text, text[-3000:]
    assert WRONG_PASSWORD not in text
    errors = [line for line in text.splitlines() if " ERROR " in line or line.startswith(("connector:", "replay:"))]
    return done.returncode, errors, time.monotonic() - started


def _sasl(bootstrap: str) -> list[str]:
    return ["--bootstrap", bootstrap, "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN",
            "--sasl-username", SASL_USER, "--sasl-password", WRONG_PASSWORD]  # fmt: skip


def _connector(tmp_path: Path, *kafka: str) -> list[str]:
    path = tmp_path / "in.jsonl"
    path.write_text('{"request_id": "a", "messages": [{"role": "user", "content": "q"}]}\n')
    return ["-m", "connector", *kafka, "--kafka-wait-s", "3", "--input-file", str(path), "--url",
            "http://127.0.0.1:9/v1/chat/completions"]  # fmt: skip


def _nowhere() -> str:
    return f"127.0.0.1:{free_port()}"


@pytest.mark.parametrize("command", ["connector", "replay"])
def test_unreachable_bootstrap_is_one_line_in_bounded_time(command: str, tmp_path: Path) -> None:
    address = _nowhere()
    args = _connector(tmp_path, "--bootstrap", address) if command == "connector" else \
        ["-m", "replay", "--bootstrap", address, "--kafka-wait-s", "3"]  # fmt: skip
    code, errors, took = _run(*args)
    assert code in {1, 3} and took < 30
    assert len(errors) == 1 and f"cannot reach Kafka at {address} within 3s" in errors[0], errors


@pytest.mark.parametrize("command", ["connector", "replay"])
def test_wrong_sasl_password_is_one_line_naming_address_and_user(command: str, kafka_sasl: str, tmp_path: Path) -> None:
    args = _connector(tmp_path, *_sasl(kafka_sasl)) if command == "connector" else \
        ["-m", "replay", *_sasl(kafka_sasl), "--kafka-wait-s", "20"]  # fmt: skip
    code, errors, took = _run(*args)
    assert code == 2 and took < 30
    assert len(errors) == 1 and f"Kafka at {kafka_sasl} refused the connection as '{SASL_USER}'" in errors[0], errors


def test_connector_missing_input_topic_is_named(kafka: KafkaSettings) -> None:
    code, errors, _ = _run("-m", "connector", "--bootstrap", kafka.bootstrap, "--input-topic", "no-such-requests")
    assert code == 2
    assert len(errors) == 1 and "--input-topic no-such-requests: no such topic" in errors[0], errors


def test_connector_run_where_every_request_failed_exits_nonzero(
    kafka: KafkaSettings, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(f'{{"request_id": "r{i}", "messages": [{{"role": "user", "content": "q"}}]}}\n'
                            for i in range(5)))  # fmt: skip
    with simulator("--rate-400", "1") as url:
        code, errors, _ = _run("-m", "connector", "--bootstrap", kafka.bootstrap, "--input-file", str(path),
                               "--url", f"{url}/v1/chat/completions", "--raw-topic", new_topic("raw"),
                               "--dlq-topic", new_topic("dlq"), "--state-topic", new_topic("state"),
                               "--transactional-id", f"all-failed-{path.stat().st_ino}")  # fmt: skip
    assert code == 4
    assert len(errors) == 1 and "every request of the run failed (5 dead letters, none answered)" in errors[0]


def test_replay_missing_topics_are_named(kafka: KafkaSettings, new_topic: Callable[..., str]) -> None:
    code, errors, _ = _run("-m", "replay", "--bootstrap", kafka.bootstrap, "--dlq-topic", "no-such-dlq")
    assert code == 2 and len(errors) == 1 and "--dlq-topic no-such-dlq: no such topic" in errors[0], errors
    dlq = new_topic("dlq")
    bad = BadRecord(b"body", "gpu_stage", Reason.INVALID_JSON, "bad", b"k", "gone-raw", 0, 7)
    producer = Producer(kafka)
    producer.produce(dlq, bad.raw, bad.key, bad.headers())
    producer.flush()
    code, errors, _ = _run("-m", "replay", "--bootstrap", kafka.bootstrap, "--dlq-topic", dlq,
                           "--group-id", f"g-{dlq}", "--transactional-id", f"t-{dlq}")  # fmt: skip
    assert code == 2 and len(errors) == 1, errors
    assert "source topic (or --target-topic) gone-raw: no such topic" in errors[0]


def test_job_missing_typed_topic_is_named_before_flink_starts(kafka: KafkaSettings) -> None:
    code, errors, took = _run("-m", "jobs.model_minute", "--bootstrap", kafka.bootstrap, "--typed-topic",
                              "no-such-typed", "--until", "latest")  # fmt: skip
    assert code == 2 and took < 60
    assert len(errors) == 1 and "--typed-topic no-such-typed: no such topic" in errors[0], errors
