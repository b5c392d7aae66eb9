"""Broker SIGKILL and restart in the middle of a worker run: typed + DLQ still hold each key once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmpipe.kafka_io import KafkaSettings, create_topics
from stack import broker
from tests.integration.gpu_stage.conftest import start_worker, worker_command, write_raw
from tests.integration.gpu_stage.test_worker import assert_exactly_once

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A broker of this test's own (the session broker must not be killed)."""
    root = tmp_path / "kafka"
    port = broker.free_port()
    broker.start(root, port)
    try:
        yield root, port
    finally:
        broker.stop(root)


def test_broker_sigkill_and_restart_mid_run(own_broker: tuple[Path, int], tmp_path: Path) -> None:
    root, port = own_broker
    kafka = KafkaSettings(bootstrap=f"127.0.0.1:{port}")
    create_topics(kafka, {"raw": 4, "typed": 1, "dlq": 1})
    expected = write_raw(kafka, "raw", 60_000)
    command = [*worker_command(kafka, "raw", "typed", "dlq", "g", "t", idle_s=6.0), "--txn-deadline", "40"]

    proc = start_worker(command, tmp_path / "w.log")
    time.sleep(3.0)
    broker.stop(root, hard=True)
    time.sleep(3.0)
    broker.start(root, port)
    restarts = 0
    while proc.wait(timeout=240) != 0 and restarts < 3:
        restarts += 1  # a supervisor restarts a worker that gave up during the outage
        proc = start_worker(command, tmp_path / "w.log")

    assert proc.returncode == 0, (tmp_path / "w.log").read_text()[-4000:]
    assert_exactly_once(kafka, "typed", "dlq", expected)
