"""Renamed options and variables: the old names still work, hidden, with one warning naming the new one.

Also the naming rule itself: every variable a connector or job option reads is ``CONNECTOR_*`` /
``JOBS_*``, or one of the shared ``KAFKA_*``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmpipe.content_schema import DEFAULT_CONTENT_SCHEMA
from llmpipe.errors import ConfigError
from llmpipe.settings import env_option, parse_args, positive_int

ROOT = Path(__file__).resolve().parents[3]
OLD_NAMES = ("CONTENT_SCHEMA", "TYPED_TOPIC", "FEATURES_TOPIC", "DLQ_TOPIC")
PREFIXES = ("CONNECTOR_", "JOBS_", "KAFKA_", "GPU_STAGE_")
SCHEMA = str(DEFAULT_CONTENT_SCHEMA)
ENV = re.compile(r"\[env: (\w+)")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(PREFIXES) or name in OLD_NAMES:
            monkeypatch.delenv(name)


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="llmpipe.settings")
    return caplog


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "llmpipe.settings"]


def _parser(environ: dict[str, str]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="x")
    env_option(p, "--count", "X_COUNT", default=3, type=positive_int, help="n", environ=environ,
               old_flags=["--old-count"], old_envs=["OLD_COUNT"])  # fmt: skip
    env_option(p, "--loud", "X_LOUD", default=False, action="store_true", help="l", environ=environ,
               old_flags=["--noisy"], old_envs=["NOISY"])  # fmt: skip
    return p


# The helper.


def test_nothing_old_used_means_no_warning_and_nothing_extra_in_the_namespace(
    warnings: pytest.LogCaptureFixture,
) -> None:
    args = parse_args(_parser({"X_COUNT": "5"}), [])
    assert vars(args) == {"count": 5, "loud": False}
    assert _said(warnings) == []


def test_an_old_variable_is_honoured_while_the_new_one_is_unset(warnings: pytest.LogCaptureFixture) -> None:
    args = parse_args(_parser({"OLD_COUNT": "7", "NOISY": "yes"}), [])
    assert (args.count, args.loud) == (7, True)
    assert _said(warnings) == [
        "OLD_COUNT is deprecated and will be removed: set X_COUNT",
        "NOISY is deprecated and will be removed: set X_LOUD",
    ]


def test_the_new_variable_wins_and_the_old_one_is_said_to_be_ignored(warnings: pytest.LogCaptureFixture) -> None:
    args = parse_args(_parser({"OLD_COUNT": "7", "X_COUNT": "9"}), [])
    assert args.count == 9
    assert _said(warnings) == ["OLD_COUNT is deprecated and ignored: X_COUNT (--count) is set"]


def test_a_flag_wins_over_an_old_variable_which_then_plays_no_part(warnings: pytest.LogCaptureFixture) -> None:
    assert parse_args(_parser({"OLD_COUNT": "abc"}), ["--count", "4"]).count == 4
    assert _said(warnings) == []


def test_an_old_flag_sets_the_option_and_warns_once_naming_the_new_flag(warnings: pytest.LogCaptureFixture) -> None:
    args = parse_args(_parser({}), ["--old-count", "8", "--old-count", "6", "--noisy"])
    assert vars(args) == {"count": 6, "loud": True}
    assert _said(warnings) == [
        "--old-count is deprecated and will be removed: use --count",
        "--noisy is deprecated and will be removed: use --loud",
    ]


def test_an_old_flag_is_hidden_from_help() -> None:
    shown = _parser({}).format_help()
    assert "--count" in shown and "--loud" in shown
    assert "--old-count" not in shown and "--noisy" not in shown
    assert "OLD_COUNT" not in shown and "NOISY" not in shown


def test_refused_values_through_old_names_name_them_as_given_and_warn_of_nothing(
    warnings: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(ConfigError, match=r"^--old-count must be an integer >= 1, not 0$"):
        parse_args(_parser({}), ["--old-count", "0"])
    with pytest.raises(ConfigError, match=r"^OLD_COUNT \(--count\) must be an integer >= 1, not -1$"):
        parse_args(_parser({"OLD_COUNT": "-1"}), [])
    assert _said(warnings) == []


# The connector: --json-schema / CONNECTOR_JSON_SCHEMA are now --content-schema / CONNECTOR_CONTENT_SCHEMA.


@pytest.fixture
def prompts(tmp_path: Path) -> str:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"request_id":"r1","messages":[{"role":"user","content":"hi"}]}\n')
    return str(path)


def test_the_connector_takes_content_schema_from_its_flag_and_variable(
    prompts: str, monkeypatch: pytest.MonkeyPatch, warnings: pytest.LogCaptureFixture
) -> None:
    from connector import settings

    expected = json.loads(DEFAULT_CONTENT_SCHEMA.read_text())
    assert settings.load(["--input-file", prompts]).content_schema is None
    assert settings.load(["--input-file", prompts, "--content-schema", SCHEMA]).content_schema == expected
    monkeypatch.setenv("CONNECTOR_CONTENT_SCHEMA", SCHEMA)
    assert settings.load(["--input-file", prompts]).content_schema == expected
    assert _said(warnings) == []


def test_the_connector_still_takes_json_schema_with_a_warning(
    prompts: str, monkeypatch: pytest.MonkeyPatch, warnings: pytest.LogCaptureFixture
) -> None:
    from connector import settings

    expected = json.loads(DEFAULT_CONTENT_SCHEMA.read_text())
    assert settings.load(["--input-file", prompts, "--json-schema", SCHEMA]).content_schema == expected
    assert _said(warnings) == ["--json-schema is deprecated and will be removed: use --content-schema"]
    warnings.clear()
    monkeypatch.setenv("CONNECTOR_JSON_SCHEMA", SCHEMA)
    assert settings.load(["--input-file", prompts]).content_schema == expected
    assert _said(warnings) == ["CONNECTOR_JSON_SCHEMA is deprecated and will be removed: set CONNECTOR_CONTENT_SCHEMA"]


def test_the_connector_help_names_only_the_new_spelling() -> None:
    from connector import settings

    shown = settings.build_parser().format_help()
    assert "--content-schema" in shown and "CONNECTOR_CONTENT_SCHEMA" in shown
    assert "json-schema" not in shown and "JSON_SCHEMA" not in shown


def test_the_command_prints_the_warning_then_the_one_line_error(prompts: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(PREFIXES) and k not in OLD_NAMES}
    done = subprocess.run(
        [sys.executable, "-m", "connector", "--input-file", prompts, "--json-schema", "/nonexistent.json"],
        cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "--json-schema is deprecated and will be removed: use --content-schema",
        "connector: --content-schema /nonexistent.json: cannot be read (No such file or directory)",
    ]


# The jobs: CONTENT_SCHEMA, TYPED_TOPIC, FEATURES_TOPIC, DLQ_TOPIC are now JOBS_*.


def test_the_jobs_read_their_jobs_variables(
    monkeypatch: pytest.MonkeyPatch, warnings: pytest.LogCaptureFixture
) -> None:
    from jobs import ab_arm, cli

    monkeypatch.setenv("JOBS_CONTENT_SCHEMA", SCHEMA)
    monkeypatch.setenv("JOBS_TYPED_TOPIC", "t.typed")
    monkeypatch.setenv("JOBS_FEATURES_TOPIC", "t.features")
    monkeypatch.setenv("JOBS_DLQ_TOPIC", "t.dlq")
    loaded = cli.settings_from_args(parse_args(ab_arm.parser(), []))
    assert (loaded.typed.topic, loaded.sink.topic) == ("t.typed", "t.features")
    assert loaded.dlq is not None and loaded.dlq.topic == "t.dlq"
    assert loaded.content_schema == json.loads(DEFAULT_CONTENT_SCHEMA.read_text()) == loaded.record.content_schema
    assert _said(warnings) == []


def test_the_jobs_still_read_the_old_names_with_a_warning_each(
    monkeypatch: pytest.MonkeyPatch, warnings: pytest.LogCaptureFixture
) -> None:
    from jobs import ab_arm, cli

    for name, value in {"CONTENT_SCHEMA": SCHEMA, "TYPED_TOPIC": "o.typed", "FEATURES_TOPIC": "o.features",
                        "DLQ_TOPIC": "o.dlq"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("JOBS_FEATURES_TOPIC", "n.features")
    loaded = cli.settings_from_args(parse_args(ab_arm.parser(), []))
    assert (loaded.typed.topic, loaded.sink.topic) == ("o.typed", "n.features")
    assert loaded.dlq is not None and loaded.dlq.topic == "o.dlq"
    assert sorted(_said(warnings)) == [
        "CONTENT_SCHEMA is deprecated and will be removed: set JOBS_CONTENT_SCHEMA",
        "DLQ_TOPIC is deprecated and will be removed: set JOBS_DLQ_TOPIC",
        "FEATURES_TOPIC is deprecated and ignored: JOBS_FEATURES_TOPIC (--features-topic) is set",
        "TYPED_TOPIC is deprecated and will be removed: set JOBS_TYPED_TOPIC",
    ]


# The naming rule.


def _env_names(parser: argparse.ArgumentParser) -> set[str]:
    return {name for action in parser._actions for name in ENV.findall(action.help or "")}


def test_every_connector_and_job_variable_has_its_service_prefix_or_is_a_shared_kafka_one() -> None:
    from connector.settings import build_parser
    from jobs import ab_arm, cli

    parsers = {"CONNECTOR_": build_parser(), "JOBS_": ab_arm.parser()}
    parsers |= {f"JOBS_ ({name})": cli.parser(name, None) for name in ("jobs.model_minute", "jobs.user_risk")}
    for prefix, parser in parsers.items():
        names = _env_names(parser)
        assert names, prefix
        outliers = {n for n in names if not n.startswith((prefix.split()[0], "KAFKA_"))}
        assert not outliers, (prefix, outliers)
    assert "CONNECTOR_CONTENT_SCHEMA" in _env_names(build_parser())
    assert {"JOBS_CONTENT_SCHEMA", "JOBS_TYPED_TOPIC", "JOBS_FEATURES_TOPIC", "JOBS_DLQ_TOPIC"} <= _env_names(
        ab_arm.parser()
    )
