"""``--schema-registry-url`` of gpu_stage and the jobs: checked at start, carried to the worker and the DDL."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from gpu_stage import __main__ as gpu_stage_main
from gpu_stage.settings import parse
from gpu_stage.transform.batch import EncodedRows
from gpu_stage.worker.wire import typed_values, value_prefix
from jobs import cli
from jobs.typed_table import EventTime, ReadRange, TopicSource, typed_format_options, typed_table_ddl
from llmpipe.errors import ConfigError
from llmpipe.kafka_io import KafkaSettings
from llmpipe.record import TypedRecord
from llmpipe.registry import unframe, wire_prefix
from tests.unit.jobs.test_jobs_typed_table import options_of

KAFKA = KafkaSettings(bootstrap="broker:9092")


# --- gpu_stage -----------------------------------------------------------------------------------


def test_gpu_stage_default_is_plain_avro(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPU_STAGE_SCHEMA_REGISTRY_URL", raising=False)
    _args, settings = parse([])
    assert settings.schema_registry_url is None
    assert value_prefix(settings, "llm.typed.x", TypedRecord.from_file().fingerprint) is None


def test_gpu_stage_takes_the_url_from_the_flag_or_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_STAGE_SCHEMA_REGISTRY_URL", "http://env-registry:8081/")
    assert parse([])[1].schema_registry_url == "http://env-registry:8081"
    flag = parse(["--schema-registry-url", "https://u:s3cret@flag-registry/api"])[1]
    assert flag.schema_registry_url == "https://u:s3cret@flag-registry/api"
    assert "s3cret" not in repr(flag)


@pytest.mark.parametrize("argv", [["--schema-registry-url", "registry:8081"], ["--schema-registry-url", "ftp://x"]])
def test_gpu_stage_refuses_a_bad_url_in_one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_stage_main.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_stage: --schema-registry-url must be an http:// or https:// URL")
    assert "\n" not in err


def test_gpu_stage_refuses_a_bad_url_from_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_STAGE_SCHEMA_REGISTRY_URL", "nope")
    with pytest.raises(ConfigError, match="GPU_STAGE_SCHEMA_REGISTRY_URL \\(--schema-registry-url\\)"):
        parse([])


def test_typed_values_are_framed_only_with_a_prefix() -> None:
    rows = [b"\x02a", b"\x04bc", b""]
    encoded = EncodedRows(b"".join(rows), np.cumsum([0, 2, 3, 0], dtype=np.int64), np.arange(3), [b"k"] * 3)
    assert list(typed_values(encoded, None)) == rows
    framed = list(typed_values(encoded, wire_prefix(12)))
    assert [unframe(v) for v in framed] == [(12, row) for row in rows]


# --- jobs ----------------------------------------------------------------------------------------


def test_typed_table_is_plain_avro_without_a_registry() -> None:
    options = options_of(typed_table_ddl("t", TypedRecord.from_file(), TopicSource(KAFKA, "x", ReadRange("earliest"))))
    assert options["format"] == "avro"
    assert not any(key.startswith("avro-confluent") for key in options)


def test_typed_table_reads_avro_confluent_from_the_registry() -> None:
    source = TopicSource(KAFKA, "x", ReadRange("earliest"), EventTime(), schema_registry_url="http://reg:8081/api")
    options = options_of(typed_table_ddl("t", TypedRecord.from_file(), source))
    assert options["format"] == "avro-confluent"
    assert options["avro-confluent.url"] == "http://reg:8081/api"
    assert "avro-confluent.basic-auth.user-info" not in options
    assert options["topic"] == "x" and options["properties.isolation.level"] == "read_committed"


def test_user_info_becomes_the_formats_basic_auth() -> None:
    source = TopicSource(KAFKA, "x", schema_registry_url="https://alice:p%40ss@reg:8443/api")
    assert typed_format_options(source) == {
        "format": "avro-confluent",
        "avro-confluent.url": "https://reg:8443/api",
        "avro-confluent.basic-auth.credentials-source": "USER_INFO",
        "avro-confluent.basic-auth.user-info": "alice:p@ss",
    }
    assert "p%40ss" not in repr(source) and "alice" not in repr(source)


def test_jobs_option_reaches_the_typed_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBS_SCHEMA_REGISTRY_URL", raising=False)
    p = cli.parser("jobs.model_minute", None)
    assert cli.settings_from_args(p.parse_args(["--bootstrap", "k:1"])).typed.schema_registry_url is None
    settings = cli.settings_from_args(p.parse_args(["--bootstrap", "k:1", "--schema-registry-url", "http://r:1/"]))
    assert settings.typed.schema_registry_url == "http://r:1"
    monkeypatch.setenv("JOBS_SCHEMA_REGISTRY_URL", "http://env:2")
    p = cli.parser("jobs.model_minute", None)
    assert cli.settings_from_args(p.parse_args(["--bootstrap", "k:1"])).typed.schema_registry_url == "http://env:2"


def test_jobs_refuse_a_bad_url_in_one_line_exit_2() -> None:
    code = "import sys; from jobs.model_minute import main; sys.exit(main(['--schema-registry-url', 'reg:1']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--schema-registry-url must be an http:// or https:// URL" in done.stderr


def test_jobs_parse_the_option_without_httpx() -> None:
    """A Flink client may have apache-flink only: the URL is checked without the HTTP client library."""
    code = ("import sys; sys.modules['httpx'] = None; from jobs import cli; "
            "a = cli.parser('jobs.x', None).parse_args(['--schema-registry-url', 'http://r:1']); "
            "print(cli.settings_from_args(a).typed.schema_registry_url)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "http://r:1"
