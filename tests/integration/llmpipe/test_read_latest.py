"""read_latest reads a state topic to its true end: past another writer's open transaction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from llmpipe import kafka_io
from llmpipe.kafka_io import KafkaSettings, TransactionalProducer

pytestmark = pytest.mark.integration


def _commit(kafka: KafkaSettings, txn_id: str, topic: str, key: bytes, value: bytes) -> None:
    producer = TransactionalProducer(kafka, txn_id)
    producer.begin()
    producer.produce(topic, value, key)
    producer.commit()


def test_latest_value_behind_an_open_transaction_is_waited_for(
    kafka: KafkaSettings, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("state")
    _commit(kafka, f"w-{topic}", topic, b"p0", b"v1")
    blocker = TransactionalProducer(kafka, f"b-{topic}")
    blocker.begin()
    blocker.produce(topic, b"never", b"other")
    blocker.flush(30)  # on the broker: the last stable offset stops here until it ends
    _commit(kafka, f"w-{topic}", topic, b"p0", b"v2")
    # A read_committed reader that stops at the last stable offset takes the older value for the latest.
    assert [m.value for m in kafka_io.read_topic(kafka, topic)] == [b"v1"]
    threading.Timer(2.0, blocker.abort).start()
    started = time.monotonic()
    latest = kafka_io.read_latest(kafka, topic, timeout_s=60)
    assert latest == {b"p0": b"v2"}
    assert time.monotonic() - started >= 1.5  # it waited for the blocker's abort


def test_empty_topic_reads_at_once(kafka: KafkaSettings, new_topic: Callable[..., str]) -> None:
    assert kafka_io.read_latest(kafka, new_topic("state")) == {}
