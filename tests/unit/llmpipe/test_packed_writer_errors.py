"""The native writer's failures become our errors by librdkafka's classification, as confluent-kafka's do."""

from __future__ import annotations

import llmpipe_native
import pytest

from llmpipe.errors import DeliveryError, FencedError
from llmpipe.kafka_io import TxnAbortable, TxnTimedOut
from llmpipe.kafka_io.config import native_config
from llmpipe.kafka_io.packed_writer import _error


@pytest.mark.parametrize(
    ("code", "fatal", "retriable", "abortable", "kind"),
    [
        ("ProducerFenced", True, False, False, FencedError),
        ("Fenced", False, False, False, FencedError),  # the local fenced state, not flagged fatal
        ("MessageSizeTooLarge", False, False, True, TxnAbortable),
        ("CoordinatorLoadInProgress", False, True, False, TxnTimedOut),
        ("OperationTimedOut", False, False, False, TxnTimedOut),  # outcome unknown: a new epoch settles it
        ("InvalidArgument", False, False, False, DeliveryError),
    ],
)
def test_each_failure_is_classified(code: str, fatal: bool, retriable: bool, abortable: bool, kind: type) -> None:
    exc = llmpipe_native.KafkaCallError(f"commit_transaction failed: {code}", code, fatal, retriable, abortable)
    error = _error(exc)
    assert type(error) is kind
    assert str(error) == f"commit_transaction failed: {code}"


def test_the_configuration_goes_to_librdkafka_as_strings_without_our_logger() -> None:
    config = {"enable.idempotence": True, "linger.ms": 50, "logger": object(), "compression.type": "lz4"}
    strings = native_config(config)
    assert strings == {"enable.idempotence": "true", "linger.ms": "50", "compression.type": "lz4"}
