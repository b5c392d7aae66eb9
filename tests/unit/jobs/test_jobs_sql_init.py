"""``python -m jobs.sql_init``: the init file's tables come from the jobs' own definitions."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import ab_arm, model_minute, sql_init, user_risk
from llmpipe.record import TypedRecord


def generate(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "init.sql"
    assert sql_init.main(["--bootstrap", "k:9092", "--output", str(out), *args]) == 0
    return out.read_text()


def test_typed_table_has_every_column_the_watermark_and_the_source_options(tmp_path: Path) -> None:
    text = generate(tmp_path, "--watermark-delay", "12")
    record = TypedRecord.from_file()
    typed = text[text.index("CREATE TEMPORARY TABLE `typed`"):text.index("CREATE TEMPORARY TABLE `dlq`")]
    for column in record.ddl_columns():
        assert column in typed
    assert "WATERMARK FOR `created` AS `created` - INTERVAL '12' SECOND" in typed
    assert f"'topic' = '{record.versioned_topic('llm.typed')}'" in typed
    assert "'properties.isolation.level' = 'read_committed'" in typed


def test_each_job_gets_a_view_of_its_own_columns(tmp_path: Path) -> None:
    text = generate(tmp_path)
    for job, output in (("model_minute", model_minute.OUTPUT), ("user_risk", user_risk.OUTPUT),
                        ("ab_arm", ab_arm.OUTPUT)):
        view = text[text.index(f"CREATE TEMPORARY VIEW `{job}_features`"):]
        view = view[:view.index(";")]
        assert view.endswith(f"WHERE `{output.key}` IS NOT NULL")
        assert all(f"`{name}`" in view for name in output.names())
    assert text.count(";\n") == 1 + 3 + 3  # SET, three tables, three views


def test_the_sasl_password_is_never_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "s3cret-value")
    text = generate(tmp_path, "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN",
                    "--sasl-username", "svc")
    assert "s3cret-value" not in text
    assert 'username="svc" password="<KAFKA_SASL_PASSWORD>"' in text


def test_a_bad_option_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert sql_init.main(["--from", "yesterday"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--from" in err


def test_the_registry_password_is_never_written(tmp_path: Path) -> None:
    text = generate(tmp_path, "--schema-registry-url", "https://svc:r3g-secret@registry:8081")
    assert "r3g-secret" not in text
    assert "'format' = 'avro-confluent'" in text and "'avro-confluent.url' = 'https://registry:8081'" in text
    assert "'avro-confluent.basic-auth.user-info' = 'svc:<SCHEMA_REGISTRY_PASSWORD>'" in text
