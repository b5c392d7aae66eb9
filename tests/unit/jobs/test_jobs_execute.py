"""``jobs.flink_env.execute`` against a fake pipeline: what a ctrl-C does once the job is submitted (no JVM)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from jobs import flink_env


class _Future:
    def result(self) -> None:
        return None


class _Client:
    def __init__(self) -> None:
        self.cancelled = 0

    def get_job_id(self) -> str:
        return "job-1"

    def cancel(self) -> _Future:
        self.cancelled += 1
        return _Future()


class _Result:
    def __init__(self, client: _Client, wait_raises: BaseException | None) -> None:
        self.client = client
        self.wait_raises = wait_raises

    def get_job_client(self) -> _Client:
        return self.client

    def wait(self) -> None:
        if self.wait_raises is not None:
            raise self.wait_raises


class _Pipeline:
    """A submitted job: ``execute`` returns at once; its wait ends as ``wait_raises`` says."""

    def __init__(self, wait_raises: BaseException | None = None) -> None:
        self.client = _Client()
        self.result = _Result(self.client, wait_raises)

    def execute(self) -> _Result:
        return self.result


class _InterruptOnWaiting(logging.Handler):
    """Raises KeyboardInterrupt while the "waiting for it to end" line is written (a ctrl-C right then)."""

    def emit(self, record: logging.LogRecord) -> None:
        if "waiting for it to end" in record.getMessage():
            raise KeyboardInterrupt


@pytest.fixture
def flink_log() -> Any:
    logger = logging.getLogger(flink_env.__name__)
    before = logger.level
    logger.setLevel(logging.INFO)
    yield logger
    logger.setLevel(before)


def test_a_job_that_ends_returns_its_id(flink_log: logging.Logger) -> None:
    pipeline = _Pipeline()
    assert flink_env.execute(pipeline) == "job-1"
    assert pipeline.client.cancelled == 0


def test_ctrl_c_while_waiting_cancels_the_job(flink_log: logging.Logger) -> None:
    pipeline = _Pipeline(wait_raises=KeyboardInterrupt())
    with pytest.raises(flink_env.JobCancelled) as caught:
        flink_env.execute(pipeline)
    assert caught.value.interrupted and caught.value.job_id == "job-1"
    assert pipeline.client.cancelled == 1


def test_ctrl_c_while_the_waiting_line_is_written_cancels_the_job(flink_log: logging.Logger) -> None:
    """The signal can come as soon as a reader sees the line, while the client is still writing it."""
    handler = _InterruptOnWaiting()
    flink_log.addHandler(handler)
    try:
        pipeline = _Pipeline()
        with pytest.raises(flink_env.JobCancelled) as caught:
            flink_env.execute(pipeline)
    finally:
        flink_log.removeHandler(handler)
    assert caught.value.interrupted
    assert pipeline.client.cancelled == 1
