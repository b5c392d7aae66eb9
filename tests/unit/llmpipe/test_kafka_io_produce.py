"""Producer errors surface as our DeliveryError, without a broker (librdkafka checks size locally)."""

from __future__ import annotations

import pytest

from llmpipe.errors import DeliveryError
from llmpipe.kafka_io import KafkaSettings, Producer


def test_a_record_over_the_size_limit_raises_delivery_error() -> None:
    producer = Producer(KafkaSettings(bootstrap="127.0.0.1:9"), {"message.max.bytes": 1000})
    with pytest.raises(DeliveryError, match="cannot produce to t"):
        producer.produce("t", b"x" * 5000, b"k")


@pytest.mark.parametrize(("backoff", "most"), [(None, 200), (100, 1000), (5, 50)])
def test_a_transactional_producer_retries_after_its_backoff(
    monkeypatch: pytest.MonkeyPatch, backoff: int | None, most: int
) -> None:
    """Back-to-back transactions wait for this backoff (librdkafka's default is 100 ms); 20 ms unless set."""
    from llmpipe.kafka_io import TXN_RETRY_BACKOFF_MS, TransactionalProducer

    monkeypatch.setattr(TransactionalProducer, "_call", lambda *args, **kwargs: None)  # no init_transactions
    kwargs = {} if backoff is None else {"retry_backoff_ms": backoff}
    producer = TransactionalProducer(KafkaSettings(bootstrap="127.0.0.1:9"), "t-1", **kwargs)
    assert producer._config["retry.backoff.ms"] == (backoff or TXN_RETRY_BACKOFF_MS) and TXN_RETRY_BACKOFF_MS == 20
    assert producer._config["retry.backoff.max.ms"] == most


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_producers_compress_as_the_settings_say(compression: str) -> None:
    producer = Producer(KafkaSettings(bootstrap="127.0.0.1:9", compression=compression))
    assert producer._config["compression.type"] == compression
    assert Producer(KafkaSettings(bootstrap="127.0.0.1:9"))._config["compression.type"] == "lz4"


def test_an_unknown_compression_is_a_config_error() -> None:
    from llmpipe.errors import ConfigError

    with pytest.raises(ConfigError, match="compression must be one of"):
        KafkaSettings(compression="brotli")


def test_the_compression_option_falls_back_to_its_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    monkeypatch.setenv("KAFKA_COMPRESSION", "none")
    parser = argparse.ArgumentParser()
    KafkaSettings.add_options(parser, "X")
    assert KafkaSettings.from_args(parser.parse_args([])).compression == "none"
    assert KafkaSettings.from_args(parser.parse_args(["--compression", "zstd"])).compression == "zstd"
    with pytest.raises(SystemExit):
        parser.parse_args(["--compression", "brotli"])
