"""The feature sink's delivery options and the job options that choose them: no broker, no JVM run."""

from __future__ import annotations

import pytest

from jobs import cli, model_minute
from jobs.sinks import Output, SinkSettings, sink_options
from llmpipe.errors import ConfigError
from llmpipe.kafka_io import KafkaSettings
from llmpipe.settings import parse_args

KAFKA = KafkaSettings(bootstrap="broker:9092")
OUTPUT = Output((("window_start", "TIMESTAMP(3)"), ("model", "STRING")), key="model")


def test_exactly_once_is_transactional_with_a_prefix_and_a_timeout_the_broker_accepts() -> None:
    options = sink_options(SinkSettings(topic="feat"), OUTPUT, KAFKA, "model_minute_features")
    assert options["sink.delivery-guarantee"] == "exactly-once"
    assert options["sink.transactional-id-prefix"] == "llmpipe.model_minute_features.feat"
    # Kafka brokers refuse transactions longer than transaction.max.timeout.ms (15 minutes by default).
    assert int(options["properties.transaction.timeout.ms"]) <= 900_000


def test_the_prefix_given_wins() -> None:
    sink = SinkSettings(topic="feat", transactional_id_prefix="llmpipe.model_minute.feat",
                        transaction_timeout_ms=60_000)
    options = sink_options(sink, OUTPUT, KAFKA)
    assert options["sink.transactional-id-prefix"] == "llmpipe.model_minute.feat"
    assert options["properties.transaction.timeout.ms"] == "60000"


def test_at_least_once_opens_no_transactions() -> None:
    options = sink_options(SinkSettings(topic="feat", guarantee="at-least-once"), OUTPUT, KAFKA)
    assert options["sink.delivery-guarantee"] == "at-least-once"
    assert not {"sink.transactional-id-prefix", "properties.transaction.timeout.ms"} & set(options)


def test_an_unknown_guarantee_is_refused() -> None:
    with pytest.raises(ConfigError, match="exactly-once or at-least-once"):
        SinkSettings(guarantee="maybe-once")


def settings(argv: list[str]) -> cli.JobSettings:
    return cli.settings_from_args(parse_args(cli.parser("jobs.model_minute", None), argv))


def test_jobs_are_named_and_their_transactional_ids_follow_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("JOBS_SINK_GUARANTEE", "JOBS_DETACH", "JOBS_CHECKPOINT_INTERVAL_MS"):
        monkeypatch.delenv(env, raising=False)
    got = settings(["--features-topic", "feat"])
    assert got.flink.job_name == "llmpipe.model_minute"
    assert got.flink.detach is False
    assert got.sink.guarantee == "exactly-once"
    assert got.sink.transactional_id_prefix == "llmpipe.model_minute.feat"


def test_detach_and_guarantee_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBS_DETACH", "1")
    monkeypatch.setenv("JOBS_SINK_GUARANTEE", "at-least-once")
    got = settings(["--checkpoint-interval-ms", "0"])
    assert got.flink.detach is True
    assert got.sink.guarantee == "at-least-once"
    assert got.flink.checkpoint_interval_ms is None


def test_print_needs_no_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBS_SINK_GUARANTEE", raising=False)
    assert settings(["--print", "--checkpoint-interval-ms", "0"]).sink.print_rows


def test_a_bounded_exactly_once_run_needs_no_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sink commits when the input ends (the demo's backfill runs so)."""
    monkeypatch.delenv("JOBS_SINK_GUARANTEE", raising=False)
    got = settings(["--until", "latest", "--checkpoint-interval-ms", "0"])
    assert got.sink.guarantee == "exactly-once"
    assert got.flink.checkpoint_interval_ms is None


@pytest.mark.parametrize(("argv", "env", "names"), [
    (["--checkpoint-interval-ms", "0"], {}, "--sink-guarantee exactly-once"),
    ([], {"JOBS_CHECKPOINT_INTERVAL_MS": "0"}, "--checkpoint-interval-ms"),
    (["--sink-guarantee", "twice"], {}, "--sink-guarantee"),
    ([], {"JOBS_SINK_GUARANTEE": "twice"}, "JOBS_SINK_GUARANTEE"),
    (["--transaction-timeout-ms", "0"], {}, "--transaction-timeout-ms"),
    ([], {"JOBS_DETACH": "maybe"}, "JOBS_DETACH"),
])
def test_bad_sink_options_exit_2_before_flink_starts(
    argv: list[str], env: dict[str, str], names: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("JOBS_SINK_GUARANTEE", "JOBS_DETACH", "JOBS_CHECKPOINT_INTERVAL_MS", "JOBS_UNTIL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        raise SystemExit(model_minute.main(["--bootstrap", "127.0.0.1:9", *argv]))
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert names in err[0]
