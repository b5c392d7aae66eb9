"""Shared fixtures: a real Kafka broker for the integration tier, fresh topics per test.

The broker is the repository's own local stack (``stack.broker``) started once per session in a
temporary folder on a free port, or an external one when ``KAFKA_BOOTSTRAP`` is set.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llmpipe.kafka_io import KafkaSettings, create_topics, delete_topics

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSettings]:
    """Settings of a running broker for this test session."""
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        yield KafkaSettings(bootstrap=external)
        return
    from stack import broker

    root = tmp_path_factory.mktemp("kafka")
    run = broker.start(root, sasl_users={SASL_USER: SASL_PASSWORD})
    try:
        yield KafkaSettings(bootstrap=run.bootstrap())
    finally:
        broker.stop(root)


SASL_USER, SASL_PASSWORD = "llmpipe-test", "sasl-test-password"
"""The PLAIN user of the session broker's SASL_PLAINTEXT listener."""


@pytest.fixture(scope="session")
def kafka_sasl(kafka: KafkaSettings, kafka_dir: Path | None) -> str:
    """Bootstrap of the session broker's SASL_PLAINTEXT listener (user ``SASL_USER``)."""
    del kafka
    from stack import broker

    found = broker.BrokerDir(kafka_dir).sasl_bootstrap() if kafka_dir is not None else None
    if found is None:
        pytest.skip("the broker under test has no SASL listener of ours")
    return found


@pytest.fixture(scope="session")
def kafka_dir(kafka: KafkaSettings, tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """Run folder of the session broker (None for an external broker), for crash/restart tests."""
    del kafka
    if os.environ.get("KAFKA_BOOTSTRAP"):
        return None
    base = tmp_path_factory.getbasetemp()
    found = sorted(base.glob("kafka*"))
    return found[0] if found else None


@pytest.fixture
def new_topic(kafka: KafkaSettings) -> Iterator[Callable[..., str]]:
    """Factory for fresh, uniquely named topics, deleted after the test."""
    made: list[str] = []

    def make(prefix: str = "t", partitions: int = 1) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        create_topics(kafka, {name: partitions})
        made.append(name)
        return name

    yield make
    if made:
        delete_topics(kafka, made)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A broker of the test's own, as (run folder, port), for tests that kill and restart it."""
    from stack import broker, procs

    root = tmp_path / "kafka"
    port = procs.free_port()
    broker.start(root, port)
    try:
        yield root, port
    finally:
        broker.stop(root)


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a schema registry's Confluent-compatible API for this session (``stack.registry``, in memory),
    or an external one when ``SCHEMA_REGISTRY_URL`` is set."""
    external = os.environ.get("SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    from stack import registry

    root = tmp_path_factory.mktemp("registry")
    run = registry.start(root)
    try:
        yield run.url()
    finally:
        registry.stop(root)
