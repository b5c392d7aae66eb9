"""The jobs' pre-flight check: a missing features topic is one line that says how to create it."""

from __future__ import annotations

import pytest

from jobs import cli
from llmpipe.errors import ConfigError
from llmpipe.kafka_io import KafkaSettings, cluster


def test_a_missing_features_topic_says_the_jobs_do_not_create_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def require_topic(settings: KafkaSettings, topic: str, option: str, timeout_s: float = 30.0) -> int:
        if topic == "llm.features":
            msg = f"{option} {topic}: no such topic at Kafka {settings.bootstrap}"
            raise ConfigError(msg)
        return 1

    monkeypatch.setattr(cluster, "await_cluster", lambda settings: None)
    monkeypatch.setattr(cluster, "require_topic", require_topic)
    args = cli.parser("jobs.model_minute", None).parse_args(["--bootstrap", "k:9092"])
    with pytest.raises(ConfigError) as caught:
        cli.check_kafka(cli.settings_from_args(args))
    message = str(caught.value)
    assert message.startswith("--features-topic llm.features: no such topic at Kafka k:9092")
    assert "kafka-topics.sh --create --topic llm.features" in message and "\n" not in message
