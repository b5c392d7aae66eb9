"""Requests about the cluster rather than a record: waiting for it at start, topics, groups, end offsets."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import confluent_kafka
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from llmpipe.errors import ConfigError, DeliveryError, SourceError
from llmpipe.kafka_io.config import KafkaSettings
from llmpipe.kafka_io.logs import DemotedLog, log, rdkafka_log


def admin(settings: KafkaSettings) -> AdminClient:
    """An AdminClient for ``settings``."""
    return AdminClient(settings.client_config())


def await_cluster(settings: KafkaSettings, timeout_s: float | None = None, *, say: bool = True) -> None:
    """Wait until the cluster answers; one line when it does not at once, one clear error when it never does.

    Refused credentials end the wait at once with a ``ConfigError`` naming the address and the user
    (retrying cannot fix them); an address that does not answer within ``timeout_s`` is a
    ``SourceError`` naming it. librdkafka's own retry lines are collapsed by :class:`RepeatFilter`.
    ``say=False`` keeps the wait silent, for a caller that reports a failure in its own words and
    asks again (the local broker's start-up, ``stack.broker``).
    """
    refused: list[KafkaError] = []

    def on_error(error: KafkaError) -> None:
        if error.code() in _AUTH_ERRORS:
            refused.append(error)

    # Its own lines say why it waits and why it gives up: librdkafka's connect failures go to DEBUG.
    config: dict[str, Any] = {**settings.client_config(), "error_cb": on_error, "logger": DemotedLog(rdkafka_log)}
    client = AdminClient(config)
    timeout_s = settings.wait_s if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    waiting = False
    while True:
        try:
            client.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            if say and waiting:
                log.info("Kafka at %s answers", settings.bootstrap)
            return
        except KafkaException as exc:
            client.poll(0.1)  # serves the error callback
            if refused:
                raise ConfigError(_auth_message(settings, refused[0])) from exc
            if time.monotonic() >= deadline:
                msg = f"cannot reach Kafka at {settings.bootstrap} within {timeout_s:.0f}s ({exc.args[0].str()})"
                raise SourceError(msg) from exc
            if say and not waiting:
                reason = exc.args[0].str()
                log.warning("waiting for Kafka at %s (up to %.0fs): %s", settings.bootstrap, timeout_s, reason)
            waiting = True
            time.sleep(0.2)



_AUTH_ERRORS = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                          KafkaError._SSL})  # fmt: skip


def _auth_message(settings: KafkaSettings, error: KafkaError) -> str:
    who = f" as {settings.sasl_username!r}" if settings.sasl_username else ""
    how = " ".join(part for part in (settings.security_protocol, settings.sasl_mechanism) if part)
    return f"Kafka at {settings.bootstrap} refused the connection{who} ({how}): {error.str()}"


def require_topic(settings: KafkaSettings, topic: str, option: str, timeout_s: float = 30.0) -> int:
    """The partition count of ``topic``; a ``ConfigError`` naming the topic and ``option`` when it does not exist."""
    client = admin(settings)
    try:
        found = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except KafkaException as exc:
        msg = f"cannot read the metadata of topic {topic} at Kafka {settings.bootstrap}: {exc.args[0].str()}"
        raise SourceError(msg) from exc
    if found is None or found.error is not None or not found.partitions:
        msg = f"{option} {topic}: no such topic at Kafka {settings.bootstrap}"
        raise ConfigError(msg)
    return len(found.partitions)


def create_topics(
    settings: KafkaSettings, topics: Mapping[str, int], config: Mapping[str, str] | None = None
) -> None:
    """Create topics (name → partitions); existing ones are left as they are."""
    client = admin(settings)
    new = [NewTopic(name, num_partitions=parts, replication_factor=1, config=dict(config or {}))
           for name, parts in topics.items()]
    for name, future in client.create_topics(new, operation_timeout=30).items():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                msg = f"cannot create topic {name}: {exc}"
                raise ConfigError(msg) from exc


def delete_topics(settings: KafkaSettings, names: Sequence[str]) -> None:
    """Delete topics, ignoring ones that do not exist."""
    client = admin(settings)
    for future in client.delete_topics(list(names), operation_timeout=30).values():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise DeliveryError(str(exc)) from exc


_COORDINATOR_MOVING = frozenset(
    {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS}
)
"""Answers while a group's coordinator is being chosen or loaded (a fresh cluster creates the offsets
topic on the first group request): asked again until the timeout."""


def group_members(settings: KafkaSettings, group: str, timeout_s: float = 10.0) -> tuple[str, list[int]]:
    """A consumer group's state (``STABLE``, ``PREPARING_REBALANCE``, …) and each member's partition count."""
    client = admin(settings)  # held until the answer is in: a dropped client never completes its futures
    deadline = time.monotonic() + timeout_s
    while True:
        future = client.describe_consumer_groups([group], request_timeout=timeout_s)[group]
        try:
            described = future.result(timeout=timeout_s + 5)
            break
        except KafkaException as exc:
            if exc.args[0].code() in _COORDINATOR_MOVING and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            msg = f"cannot describe consumer group {group}: {exc}"
            raise SourceError(msg) from exc
        except TimeoutError as exc:
            msg = f"cannot describe consumer group {group}: {exc}"
            raise SourceError(msg) from exc
    members = [len(m.assignment.topic_partitions) if m.assignment else 0 for m in described.members]
    return described.state.name, members


def group_offsets(settings: KafkaSettings, group: str, timeout_s: float = 10.0) -> dict[tuple[str, int], int]:
    """A consumer group's committed offsets (the next offset to read) per topic partition."""
    client = admin(settings)  # held until the answer is in
    request = [ConsumerGroupTopicPartitions(group)]
    future = client.list_consumer_group_offsets(request, request_timeout=timeout_s)[group]
    try:
        answer = future.result(timeout=timeout_s + 5)
    except (KafkaException, TimeoutError) as exc:
        msg = f"cannot list the offsets of consumer group {group}: {exc}"
        raise SourceError(msg) from exc
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.offset >= 0}


def end_offsets(settings: KafkaSettings, topic: str) -> dict[int, int]:
    """High watermark per partition (for lag and for reading a topic to its end)."""
    consumer = confluent_kafka.Consumer({**settings.client_config(), "group.id": "llmpipe-watermarks"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None:
            raise SourceError(str(meta.error))
        marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                 for p in meta.partitions}
        return {p: high for p, (_low, high) in marks.items()}
    finally:
        consumer.close()
