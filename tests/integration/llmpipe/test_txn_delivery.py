"""Records sent with ``produce_many`` (no callback each) are confirmed by the transaction's commit.

On a real broker: a record the broker refuses makes ``commit`` raise the abortable error, nothing of
that transaction becomes visible (the record it took before the refused one included), and the
producer goes on. The same holds with delivery reports for failed records only (the worker's
setting): the commit does not depend on reports of delivered ones.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from llmpipe.kafka_io import KafkaSettings, TransactionalProducer, TxnAbortable, read_topic
from tests.integration.llmpipe.txn_testlib import REPORTS

pytestmark = pytest.mark.integration

BROKER_LIMIT = 16 << 20
"""The local stack's ``message.max.bytes``: a record batch larger than this is refused by the broker."""


@pytest.mark.parametrize("reports", REPORTS.values(), ids=REPORTS.keys())
def test_a_record_the_broker_refuses_fails_the_commit(kafka: KafkaSettings, new_topic: Any,
                                                      reports: dict[str, Any]) -> None:  # fmt: skip
    topic = new_topic("refused")
    # librdkafka lets the record through (its own limit is above the broker's); random bytes stay large compressed.
    producer = TransactionalProducer(kafka, f"refused-{topic}", config={"message.max.bytes": 64 << 20, **reports})
    producer.begin()
    producer.produce_many(topic, [b"fits", os.urandom(BROKER_LIMIT + (1 << 20))], [b"k1", b"k2"])
    with pytest.raises(TxnAbortable, match="MSG_SIZE_TOO_LARGE"):
        producer.commit()
    producer.abort()
    # The refused record left a gap in the partition's sequence numbers: librdkafka fails the next
    # commit once more, and bumps the epoch on its abort; the worker rewinds and retries the same way.
    for _ in range(3):
        producer.begin()
        producer.produce_many(topic, [b"after"], [b"k3"])
        try:
            producer.commit()
            break
        except TxnAbortable:
            producer.abort()
    else:
        pytest.fail("no transaction committed after the refused one")
    assert [(m.key, m.value) for m in read_topic(kafka, topic)] == [(b"k3", b"after")]
