"""The columnar batch path of kafka_io: ``Records`` and ``produce_many``, without a broker."""

from __future__ import annotations

import confluent_kafka
import pytest

from gpu_stage.worker import to_batch
from llmpipe.errors import DeliveryError
from llmpipe.kafka_io import KafkaSettings, Message, Producer, Records, TransactionalProducer


def kafka_message(topic: str, partition: int, offset: int, value: bytes | None = b"v") -> confluent_kafka.Message:
    return confluent_kafka.Message(
        topic=topic, partition=partition, offset=offset, key=f"k{offset}".encode(), value=value,
        headers=None if offset % 2 else [("h", b"x")], timestamp=(1, 1000 + offset),
    )  # fmt: skip


def test_records_of_librdkafka_messages_match_detached_messages() -> None:
    got = [kafka_message("t", offset % 3, offset) for offset in range(10)]
    records = Records.of(got)
    assert records.messages() == [
        Message(m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers() or [], m.timestamp()[1])
        for m in got
    ]
    assert records.nbytes == 10
    assert Records.of(got, "t") == records
    assert Records.of_messages(records.messages()) == records


def test_next_offsets_and_partitions_seen_one_topic_and_several() -> None:
    one = Records.of([kafka_message("t", p, o) for o, p in [(4, 0), (7, 1), (5, 0), (9, 1), (6, 0)]], "t")
    assert one.next_offsets() == {("t", 0): 7, ("t", 1): 10}
    assert one.partitions_seen() == {("t", 0), ("t", 1)}
    two = Records.of([kafka_message("a", 0, 3), kafka_message("b", 0, 8), kafka_message("a", 0, 4)])
    assert two.next_offsets() == {("a", 0): 5, ("b", 0): 9}
    assert two.partitions_seen() == {("a", 0), ("b", 0)}


def test_without_drops_the_partitions_and_keeps_the_order() -> None:
    records = Records.of([kafka_message("t", o % 2, o, b"xy") for o in range(6)], "t")
    kept = records.without({("t", 1)})
    assert kept.offsets == [0, 2, 4]
    assert kept.nbytes == 6
    assert kept.keys == [b"k0", b"k2", b"k4"]
    assert records.without({("t", 5)}) is records
    assert len(records.without({("t", 0), ("t", 1)})) == 0


def test_extend_appends_every_column() -> None:
    records = Records.of([kafka_message("t", 0, 0)], "t")
    records.extend(Records.of([kafka_message("t", 1, 1, None)], "t"))
    assert records.offsets == [0, 1]
    assert records.values == [b"v", None]
    assert records.headers == [[("h", b"x")], []]
    assert records.nbytes == 1


def test_to_batch_takes_records_or_messages_and_empties_missing_values() -> None:
    records = Records.of([kafka_message("t", 0, 0), kafka_message("t", 0, 1, None)], "t")
    for batch in (to_batch(records), to_batch(records.messages())):
        assert list(batch.values) == [b"v", b""]
        assert batch.topic == "t"
        assert list(batch.offsets) == [0, 1]
        assert list(batch.timestamps_ms) == [1000, 1001]


def test_produce_many_raises_delivery_error_for_a_refused_record() -> None:
    producer = TransactionalProducer.__new__(TransactionalProducer)  # no broker: skip init_transactions
    Producer.__init__(producer, KafkaSettings(bootstrap="127.0.0.1:9"), {"message.max.bytes": 1000})
    with pytest.raises(DeliveryError, match="cannot produce to t") as caught:
        producer.produce_many("t", [b"ok", b"x" * 5000], [b"k1", b"k2"], [("h", b"v")])
    cause = caught.value.__cause__
    assert isinstance(cause, confluent_kafka.KafkaException)
    assert cause.args[0].code() == confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE
