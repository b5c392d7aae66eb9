"""The jobs run on a Flink client that has apache-flink but not confluent-kafka.

A cluster's client Python (``flink run -pyfs``) may have only apache-flink installed; the jobs and the
SQL init generator must import and parse their options there. The pre-flight topic check, which needs
confluent-kafka, is then skipped with a warning instead of failing the submission.
"""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from jobs import cli

WITHOUT_CONFLUENT = "import sys; sys.modules['confluent_kafka'] = None; "
MODULES = ("jobs.model_minute", "jobs.user_risk", "jobs.ab_arm", "jobs.sql_init")


@pytest.mark.parametrize("module", MODULES)
def test_job_module_imports_and_parses_options_without_confluent_kafka(module: str) -> None:
    code = (WITHOUT_CONFLUENT + f"import runpy; sys.argv = ['{module}', '--help']; "
            f"runpy.run_module('{module}', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--typed-topic" in done.stdout


def test_sql_init_runs_without_confluent_kafka() -> None:
    code = WITHOUT_CONFLUENT + "from jobs.sql_init import main; sys.exit(main(['--bootstrap', 'k:9092']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'properties.bootstrap.servers' = 'k:9092'" in done.stdout


def test_topic_check_is_skipped_with_a_warning_without_confluent_kafka(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "llmpipe.kafka_io.cluster", None)
    settings = cli.settings_from_args(cli.parser("jobs.model_minute", None).parse_args(["--bootstrap", "nowhere:1"]))
    with caplog.at_level(logging.WARNING):
        cli.check_kafka(settings)  # would wait for the cluster "nowhere:1" if it tried
    assert "confluent-kafka is not installed" in caplog.text
