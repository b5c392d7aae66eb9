"""A worker that starts against a cluster it cannot use says why in one line and exits nonzero, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from llmpipe.kafka_io import KafkaSettings
from stack.procs import free_port
from tests.conftest import SASL_USER
from tests.integration.gpu_stage.conftest import ROOT

pytestmark = pytest.mark.integration


def run_worker(*args: str, timeout_s: float = 60.0) -> tuple[int, str, float]:
    """Run ``python -m gpu_stage`` to its end: exit code, output (stdout and stderr), seconds taken."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpu_stage", "--backend", "cpu", "--log-level", "INFO", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def error_lines(output: str) -> list[str]:
    """Log lines at ERROR or above, and the one-line settings errors ``main`` prints."""
    return [line for line in output.splitlines()
            if " ERROR " in line or " CRITICAL " in line or line.startswith("gpu_stage:")]  # fmt: skip


def test_no_broker_at_the_bootstrap_address_is_one_line_and_exit_1() -> None:
    address = f"127.0.0.1:{free_port()}"
    code, output, seconds = run_worker("--bootstrap", address, "--kafka-wait-s", "3", "--raw-topic", "raw")
    print(f"no broker: exit {code} after {seconds:.1f}s:\n{output}")
    assert code == 1, output
    assert "Traceback" not in output
    (line,) = error_lines(output)
    assert f"cannot reach Kafka at {address} within 3s" in line
    assert seconds < 3 + 10  # the wait, plus the interpreter's start
    assert output.count("waiting for Kafka") == 1


def test_a_missing_raw_topic_is_named_in_one_line_and_exit_2(kafka: KafkaSettings) -> None:
    topic = f"nope-{uuid.uuid4().hex[:8]}"
    code, output, _ = run_worker("--bootstrap", kafka.bootstrap, "--raw-topic", topic)
    assert code == 2, output
    assert "Traceback" not in output
    (line,) = error_lines(output)
    assert f"--raw-topic {topic}: no such topic at Kafka {kafka.bootstrap}" in line


def test_a_refused_sasl_password_is_one_line_naming_address_and_user_and_exit_2(kafka_sasl: str) -> None:
    password = f"wrong-{uuid.uuid4().hex[:8]}"
    code, output, seconds = run_worker(
        "--bootstrap", kafka_sasl, "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN",
        "--sasl-username", SASL_USER, "--sasl-password", password, "--raw-topic", "raw",
    )  # fmt: skip
    assert code == 2, output
    assert "Traceback" not in output
    (line,) = error_lines(output)
    assert f"Kafka at {kafka_sasl} refused the connection as '{SASL_USER}'" in line
    assert password not in output
    assert seconds < 30  # refused at once, not after the 30 s wait for an unreachable cluster
