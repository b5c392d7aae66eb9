"""``python -m gpu_stage --print-schema``: a table a SQL user can start from, without secrets."""

from __future__ import annotations

import pytest

from gpu_stage.__main__ import main
from llmpipe.record import TypedRecord


def test_print_schema_gives_the_full_table_with_watermark_and_no_password(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "kafka-pw-1")
    argv = ["--print-schema", "--bootstrap", "k:9092", "--security-protocol", "SASL_PLAINTEXT",
            "--sasl-mechanism", "PLAIN", "--sasl-username", "svc",
            "--schema-registry-url", "http://reg:reg-pw-2@registry:8081"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    record = TypedRecord.from_file()
    assert f"'topic' = '{record.versioned_topic('llm.typed')}'" in out
    assert "WATERMARK FOR `created` AS `created` - INTERVAL '30' SECOND" in out
    assert "'format' = 'avro-confluent'" in out and "'avro-confluent.url' = 'http://registry:8081'" in out
    assert all(column in out for column in record.ddl_columns())
    assert "kafka-pw-1" not in out and "reg-pw-2" not in out
