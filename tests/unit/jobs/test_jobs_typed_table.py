"""DDL generation for the feature jobs' tables: no broker, no JVM."""

from __future__ import annotations

import re

import pytest

from jobs.sinks import Output, SinkSettings, sink_ddl
from jobs.typed_table import (
    EventTime,
    ReadRange,
    TopicSource,
    dlq_table_ddl,
    quote,
    typed_table_ddl,
)
from llmpipe.errors import ConfigError
from llmpipe.kafka_io import KafkaSettings
from llmpipe.record import TypedRecord
from llmpipe.settings import Secret

KAFKA = KafkaSettings(bootstrap="broker:9092")
OPTION = re.compile(r"^\s*'((?:[^']|'')*)' = '((?:[^']|'')*)',?$")


def options_of(ddl: str) -> dict[str, str]:
    """The WITH options of a DDL, read back with a regex (independent of the generator)."""
    with_part = ddl[ddl.index(") WITH (") :]
    pairs = [OPTION.match(line) for line in with_part.splitlines()[1:-1]]
    assert all(pairs), with_part
    return {m.group(1).replace("''", "'"): m.group(2).replace("''", "'") for m in pairs if m}


def columns_of(ddl: str) -> list[str]:
    head = ddl[ddl.index("(\n") + 2 : ddl.index("\n) WITH")]
    return [line.strip().rstrip(",") for line in head.splitlines()]


def test_typed_columns_are_the_record_definition_in_order_plus_the_watermark() -> None:
    record = TypedRecord.from_file()
    ddl = typed_table_ddl("typed", record, TopicSource(KAFKA, "llm.typed", ReadRange("earliest"), EventTime(delay_s=7)))
    columns = columns_of(ddl)
    assert ddl.startswith("CREATE TEMPORARY TABLE `typed` (")
    assert columns[:-1] == record.ddl_columns()
    assert columns[-1] == "WATERMARK FOR `created` AS `created` - INTERVAL '7' SECOND"
    assert "`created` TIMESTAMP(3)" in columns
    content = next(c for c in columns if c.startswith("`content` "))
    assert content == ("`content` ROW<`sentiment` STRING, `score` DOUBLE, `risk_level` STRING, "
                       "`topics` ARRAY<STRING>, `needs_review` BOOLEAN>")


def test_typed_source_options_for_a_bounded_backfill() -> None:
    source = TopicSource(KAFKA, "llm.typed.abc", ReadRange(start="earliest", until="latest"),
                         EventTime(idle_timeout_s=12, on_event=True))
    assert options_of(typed_table_ddl("typed", TypedRecord.from_file(), source)) == {
        "connector": "kafka",
        "topic": "llm.typed.abc",
        "properties.bootstrap.servers": "broker:9092",
        "properties.security.protocol": "PLAINTEXT",
        "properties.isolation.level": "read_committed",
        "scan.startup.mode": "earliest-offset",
        "scan.bounded.mode": "latest-offset",
        "scan.watermark.idle-timeout": "12 s",
        "scan.watermark.emit.strategy": "on-event",
        "format": "avro",
    }


def test_streaming_from_committed_group_offsets_is_the_default() -> None:
    opts = options_of(typed_table_ddl("t", TypedRecord.from_file(),
                                      TopicSource(KAFKA, "x", ReadRange(group_id="features"))))
    assert opts["scan.startup.mode"] == "group-offsets"
    assert opts["properties.group.id"] == "features"
    assert opts["properties.auto.offset.reset"] == "earliest"
    assert "scan.bounded.mode" not in opts
    assert opts["scan.watermark.emit.strategy"] == "on-periodic"


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        (ReadRange("timestamp:1700000000000", "timestamp:1700000060000"),
         {"scan.startup.mode": "timestamp", "scan.startup.timestamp-millis": "1700000000000",
          "scan.bounded.mode": "timestamp", "scan.bounded.timestamp-millis": "1700000060000"}),
        (ReadRange("latest", "none"), {"scan.startup.mode": "latest-offset"}),
    ],
)
def test_read_ranges(read: ReadRange, expected: dict[str, str]) -> None:
    assert read.options() == expected


@pytest.mark.parametrize("read", [ReadRange("group"), ReadRange("earliest", "tomorrow"),
                                  ReadRange("timestamp:abc"), ReadRange("first")])
def test_bad_read_ranges_are_config_errors(read: ReadRange) -> None:
    with pytest.raises(ConfigError):
        read.options()


def test_values_are_quoted_so_they_cannot_break_the_statement() -> None:
    assert quote("it's") == "'it''s'"
    ddl = typed_table_ddl("t", TypedRecord.from_file(), TopicSource(KAFKA, "a'b", ReadRange("earliest")))
    assert options_of(ddl)["topic"] == "a'b"


def test_sasl_settings_become_java_client_properties() -> None:
    kafka = KafkaSettings(bootstrap="b:9093", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                          sasl_username="svc", sasl_password=Secret('p"w'), ssl_ca_location="/ca.pem")
    opts = options_of(typed_table_ddl("t", TypedRecord.from_file(), TopicSource(kafka, "x", ReadRange("earliest"))))
    assert opts["properties.security.protocol"] == "SASL_SSL"
    assert opts["properties.sasl.mechanism"] == "SCRAM-SHA-512"
    assert opts["properties.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="p\\"w";')
    assert opts["properties.ssl.truststore.type"] == "PEM"
    assert opts["properties.ssl.truststore.location"] == "/ca.pem"


def test_unknown_sasl_mechanism_is_refused() -> None:
    kafka = KafkaSettings(sasl_mechanism="GSSAPI")
    with pytest.raises(ConfigError):
        typed_table_ddl("t", TypedRecord.from_file(), TopicSource(kafka, "x", ReadRange("earliest")))


def test_dlq_table_reads_raw_bytes_headers_and_kafka_time() -> None:
    ddl = dlq_table_ddl("dlq", TopicSource(KAFKA, "llm.dlq", ReadRange("earliest", "latest"), EventTime(3)))
    columns = columns_of(ddl)
    assert columns[0] == "`value` BYTES"
    assert "`headers` MAP<STRING, BYTES> METADATA FROM 'headers'" in columns
    assert "`kafka_ts` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL" in columns
    assert columns[-1] == "WATERMARK FOR `event_time` AS `event_time` - INTERVAL '3' SECOND"
    opts = options_of(ddl)
    assert opts["format"] == "raw"
    assert opts["properties.isolation.level"] == "read_committed"


def test_feature_sink_is_keyed_json_or_print() -> None:
    output = Output((("window_start", "TIMESTAMP(3)"), ("model", "STRING"), ("requests", "BIGINT")), "model")
    ddl = sink_ddl("out", output, SinkSettings(topic="feat"), KAFKA)
    assert columns_of(ddl) == ["`window_start` TIMESTAMP(3)", "`model` STRING", "`requests` BIGINT"]
    opts = options_of(ddl)
    assert (opts["topic"], opts["key.fields"], opts["key.format"]) == ("feat", "model", "raw")
    assert (opts["value.format"], opts["value.fields-include"]) == ("json", "ALL")
    assert options_of(sink_ddl("out", output, SinkSettings(print_rows=True), KAFKA)) == {"connector": "print"}
