"""Consumer-group introspection of kafka_io against a real broker: members, assignments, committed offsets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import confluent_kafka
import pytest

from llmpipe.errors import SourceError
from llmpipe.kafka_io import KafkaSettings, group_members, group_offsets


def _stable(kafka: KafkaSettings, group: str, consumer: confluent_kafka.Consumer) -> tuple[str, list[int]]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        consumer.poll(0.2)  # the member joins and heartbeats from inside poll
        state, members = group_members(kafka, group)
        if state == "STABLE" and members and all(members):
            return state, members
    pytest.fail(f"group {group} did not become stable")


def test_one_member_owns_every_partition_and_its_commits_are_listed(
    kafka: KafkaSettings, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("groups", partitions=3)
    producer = confluent_kafka.Producer(kafka.client_config())
    for i in range(9):
        producer.produce(topic, b"v", f"k{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = confluent_kafka.Consumer({**kafka.client_config(), "group.id": group,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    try:
        assert _stable(kafka, group, consumer) == ("STABLE", [3])
        commits = [confluent_kafka.TopicPartition(topic, p, offset) for p, offset in ((0, 3), (1, 1))]
        consumer.commit(offsets=commits, asynchronous=False)
        assert group_offsets(kafka, group) == {(topic, 0): 3, (topic, 1): 1}
    finally:
        consumer.close()
    assert group_members(kafka, group) == ("EMPTY", [])


def test_an_unknown_group_has_no_members_and_no_offsets(kafka: KafkaSettings) -> None:
    group = f"never-{uuid.uuid4().hex[:8]}"
    state, members = group_members(kafka, group)
    assert members == []
    assert state in ("DEAD", "UNKNOWN", "EMPTY")
    assert group_offsets(kafka, group) == {}


def test_an_unreachable_broker_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="cannot describe consumer group"):
        group_members(KafkaSettings(bootstrap="127.0.0.1:9"), "g", timeout_s=1.0)
