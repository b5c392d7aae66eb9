"""Topics for the jobs' tests: records carry fixed past timestamps, so time-based retention is off.

With the broker's default 7-day retention, a segment whose newest record is older than a week is
deleted at the next retention check, possibly while a job is reading it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from llmpipe.kafka_io import KafkaSettings, create_topics, delete_topics


@pytest.fixture
def new_topic(kafka: KafkaSettings) -> Iterator[Callable[..., str]]:
    """Like the shared factory, with ``retention.ms = -1``."""
    made: list[str] = []

    def make(prefix: str = "t", partitions: int = 1) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        create_topics(kafka, {name: partitions}, {"retention.ms": "-1"})
        made.append(name)
        return name

    yield make
    if made:
        delete_topics(kafka, made)
