"""Producer errors surface as our DeliveryError, without a broker (librdkafka checks size locally)."""

from __future__ import annotations

import pytest

from llmpipe.errors import DeliveryError
from llmpipe.kafka_io import KafkaSettings, Producer


def test_a_record_over_the_size_limit_raises_delivery_error() -> None:
    producer = Producer(KafkaSettings(bootstrap="127.0.0.1:9"), {"message.max.bytes": 1000})
    with pytest.raises(DeliveryError, match="cannot produce to t"):
        producer.produce("t", b"x" * 5000, b"k")
