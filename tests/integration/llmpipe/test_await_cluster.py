"""Start-up connection checks against a real broker: unreachable, refused credentials, missing topic."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from llmpipe.errors import ConfigError, SourceError
from llmpipe.kafka_io import KafkaSettings, await_cluster, require_topic
from llmpipe.settings import Secret
from stack.procs import free_port
from tests.conftest import SASL_PASSWORD, SASL_USER

pytestmark = pytest.mark.integration


def _sasl(bootstrap: str, password: str) -> KafkaSettings:
    return KafkaSettings(bootstrap=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                         sasl_username=SASL_USER, sasl_password=Secret(password))  # fmt: skip


def test_unreachable_address_is_named_within_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(SourceError, match=f"cannot reach Kafka at {address} within 3s"):
        await_cluster(KafkaSettings(bootstrap=address), timeout_s=3)
    assert time.monotonic() - started < 10
    waiting = [r for r in caplog.records if r.getMessage().startswith("waiting for Kafka")]
    assert len(waiting) == 1


def test_wrong_password_is_refused_at_once_without_showing_it(kafka_sasl: str) -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        await_cluster(_sasl(kafka_sasl, "not-the-password"), timeout_s=30)
    assert time.monotonic() - started < 15
    text = str(caught.value)
    assert f"Kafka at {kafka_sasl} refused the connection as '{SASL_USER}' (SASL_PLAINTEXT PLAIN)" in text
    assert "not-the-password" not in text


def test_right_password_connects(kafka_sasl: str) -> None:
    await_cluster(_sasl(kafka_sasl, SASL_PASSWORD), timeout_s=30)


def test_missing_topic_is_named(kafka: KafkaSettings, new_topic: Callable[..., str]) -> None:
    assert require_topic(kafka, new_topic("here", 3), "--raw-topic") == 3
    with pytest.raises(ConfigError, match=f"--raw-topic nope-x: no such topic at Kafka {kafka.bootstrap}"):
        require_topic(kafka, "nope-x", "--raw-topic")
