"""The consumer's client configuration, without a broker."""

from __future__ import annotations

from typing import Any

import pytest

from llmpipe.kafka_io import FETCH_QUEUE_BACKOFF_MS, Consumer, KafkaSettings
from llmpipe.kafka_io import consumer as consumer_module


class _Client:
    """Stands in for confluent_kafka.Consumer: keeps the configuration it was made with."""

    made: list[dict[str, Any]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.made.append(config)

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        del topics, callbacks


@pytest.mark.parametrize(("backoff", "expected"), [(None, FETCH_QUEUE_BACKOFF_MS), (0, 0), (1000, 1000)])
def test_a_full_prefetch_queue_pauses_fetching_for_the_backoff(
    monkeypatch: pytest.MonkeyPatch, backoff: int | None, expected: int
) -> None:
    """librdkafka pauses 1000 ms by default; the consumers here 10 ms unless told otherwise."""
    monkeypatch.setattr(consumer_module.confluent_kafka, "Consumer", _Client)
    _Client.made.clear()
    kwargs = {} if backoff is None else {"fetch_backoff_ms": backoff}
    Consumer(KafkaSettings(bootstrap="127.0.0.1:9"), "g", ["t"], **kwargs)
    config = _Client.made[0]
    assert config["fetch.queue.backoff.ms"] == expected and FETCH_QUEUE_BACKOFF_MS == 10
    assert config["isolation.level"] == "read_committed" and config["enable.auto.commit"] is False


def test_a_config_entry_overrides_the_backoff_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumer_module.confluent_kafka, "Consumer", _Client)
    _Client.made.clear()
    Consumer(KafkaSettings(bootstrap="127.0.0.1:9"), "g", ["t"], config={"fetch.queue.backoff.ms": 50})
    assert _Client.made[0]["fetch.queue.backoff.ms"] == 50
