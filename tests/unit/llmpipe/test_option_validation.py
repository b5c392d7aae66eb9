"""Every command refuses a bad option value at start: one line on stderr naming it, exit 2, no traceback."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from llmpipe.errors import ConfigError
from llmpipe.settings import Bounded, env_option, non_negative_float, parse_args, port, positive_int, ratio

ROOT = Path(__file__).resolve().parents[3]
ENV_PREFIXES = ("CONNECTOR_", "GPU_STAGE_", "REPLAY_", "VLLM_SIM_", "STACK_", "JOBS_", "KAFKA_")
ENV_NAMES = ("CONTENT_SCHEMA", "TYPED_TOPIC", "FEATURES_TOPIC", "DLQ_TOPIC", "RAW_TOPIC")
"""Unprefixed variables still read: the jobs' deprecated old names, and jobs.peer_raw's --raw-topic."""
INPUT = ["--input-file", "{tmp}/prompts.jsonl"]
"""The connector needs an input that exists to get past its input checks."""

TOPIC_RULE = "a Kafka topic name (1-249 letters, digits, '.', '_' or '-')"

CASES: list[tuple[str, list[str], dict[str, str], str]] = [
    # The operator's list.
    ("gpu_stage", ["--batch-wait-ms", "0"], {}, "gpu_stage: --batch-wait-ms must be an integer >= 1, not 0"),
    ("gpu_stage", ["--batch-wait-ms", "-20"], {}, "gpu_stage: --batch-wait-ms must be an integer >= 1, not -20"),
    ("gpu_stage", ["--txn-deadline", "-1"], {}, "gpu_stage: --txn-deadline must be a number > 0, not -1"),
    ("connector", [*INPUT, "--max-txn-records", "0"], {},
     "connector: --max-txn-records must be an integer >= 1, not 0"),
    ("connector", [*INPUT, "--max-attempts", "0"], {}, "connector: --max-attempts must be an integer >= 1, not 0"),
    ("connector", [*INPUT, "--max-in-flight", "0"], {}, "connector: --max-in-flight must be an integer >= 1, not 0"),
    ("connector", [*INPUT, "--max-pending", "-5"], {}, "connector: --max-pending must be an integer >= 0, not -5"),
    ("connector", [*INPUT, "--max-in-flight", "-1"], {}, "connector: --max-in-flight must be an integer >= 1, not -1"),
    ("replay", ["--batch-records", "0"], {}, "replay: --batch-records must be an integer in [1, 1000000], not 0"),
    ("replay", ["--batch-records", "-1"], {}, "replay: --batch-records must be an integer in [1, 1000000], not -1"),
    # Environment variables: the variable and the option, the text as it was given.
    ("connector", INPUT, {"CONNECTOR_MAX_IN_FLIGHT": "abc"},
     "connector: CONNECTOR_MAX_IN_FLIGHT (--max-in-flight) must be an integer >= 1, not 'abc'"),
    ("connector", INPUT, {"CONNECTOR_TRANSPORT": "spdy"},
     "connector: CONNECTOR_TRANSPORT (--transport) must be one of direct, aiohttp, httpx, not 'spdy'"),
    ("connector", INPUT, {"CONNECTOR_STREAM": "maybe"},
     "connector: CONNECTOR_STREAM (--stream) must be one of 1, true, yes, on, 0, false, no, off (or empty), "
     "not 'maybe'"),
    ("gpu_stage", [], {"GPU_STAGE_BATCH_RECORDS": "many"},
     "gpu_stage: GPU_STAGE_BATCH_RECORDS (--batch-records) must be an integer >= 1, not 'many'"),
    ("gpu_stage", [], {"KAFKA_COMPRESSION": "brotli"},
     "gpu_stage: KAFKA_COMPRESSION (--compression) must be one of none, lz4, zstd, snappy, gzip, not 'brotli'"),
    ("replay", [], {"REPLAY_BATCH_RECORDS": "0"},
     "replay: REPLAY_BATCH_RECORDS (--batch-records) must be an integer in [1, 1000000], not 0"),
    ("replay", [], {"REPLAY_LOG_LEVEL": "LOUD"},
     "replay: REPLAY_LOG_LEVEL (--log-level) is not valid: unknown logging level 'LOUD'"),
    ("vllm_sim", [], {"VLLM_SIM_PORT": "eighty"},
     "vllm_sim: VLLM_SIM_PORT (--port) must be an integer in [0, 65535], not 'eighty'"),
    ("stack", ["status"], {"STACK_KAFKA_PORT": "x"},
     "stack: STACK_KAFKA_PORT (--port) must be an integer in [0, 65535], not 'x'"),
    ("jobs.model_minute", [], {"JOBS_PARALLELISM": "two"},
     "jobs.model_minute: JOBS_PARALLELISM (--parallelism) must be an integer >= 1, not 'two'"),
    ("jobs.model_minute", [], {"JOBS_TYPED_TOPIC": "llm typed"},
     f"jobs.model_minute: JOBS_TYPED_TOPIC (--typed-topic) must be {TOPIC_RULE}, not 'llm typed'"),
    # A deprecated variable's refused value names the variable as it was set.
    ("jobs.ab_arm", [], {"DLQ_TOPIC": "a/b"}, f"jobs.ab_arm: DLQ_TOPIC (--dlq-topic) must be {TOPIC_RULE}, not 'a/b'"),
    # A sample of every other command's options.
    ("connector", [*INPUT, "--timeout-s", "0"], {}, "connector: --timeout-s must be a number > 0, not 0"),
    ("connector", [*INPUT, "--backoff-max-s", "-0.5"], {},
     "connector: --backoff-max-s must be a number >= 0, not -0.5"),
    ("connector", [*INPUT, "--metrics-port", "0"], {},
     "connector: --metrics-port must be an integer in [1, 65535], not 0"),
    ("connector", [*INPUT, "--max-record-bytes", "100"], {},
     "connector: --max-record-bytes must be an integer >= 16384, not 100"),
    ("connector", [*INPUT, "--commit-interval-ms", "1.5"], {},
     "connector: --commit-interval-ms must be an integer >= 0, not 1.5"),
    ("connector", [*INPUT, "--url", "localhost:8000"], {},
     "connector: --url must be an http:// or https:// URL with a host, not 'localhost:8000'"),
    ("connector", [*INPUT, "--raw-topic", "llm raw"], {},
     f"connector: --raw-topic must be {TOPIC_RULE}, not 'llm raw'"),
    ("connector", [*INPUT, "--group-id", " "], {}, "connector: --group-id must be a non-empty string, not ' '"),
    ("connector", [*INPUT, "--schema-name", "my schema"], {},
     "connector: --schema-name must be 1-64 letters, digits, '_' or '-' (as response_format names go), "
     "not 'my schema'"),
    ("connector", ["--input-file", "{tmp}/missing.jsonl"], {},
     "connector: --input-file {tmp}/missing.jsonl: no such file"),
    ("connector", [*INPUT, "--ca-file", "{tmp}/ca.pem"], {}, "connector: --ca-file {tmp}/ca.pem: no such file"),
    ("connector", [*INPUT, "--ca-file", "{tmp}"], {}, "connector: --ca-file {tmp}: is a folder, not a file"),
    ("connector", [*INPUT, "--client-key", "{tmp}/prompts.jsonl"], {},
     "connector: --client-key needs --client-cert (the key of which certificate?)"),
    ("connector", [*INPUT, "--security-protocol", "TLS"], {},
     "connector: --security-protocol must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, not 'TLS'"),
    ("connector", [*INPUT, "--ssl-ca-location", "{tmp}/kafka-ca.pem"], {},
     "connector: --ssl-ca-location {tmp}/kafka-ca.pem: no such file or folder"),
    ("connector", [], {}, "connector: give exactly one of --input-topic / --input-file"),
    ("gpu_stage", ["--max-bad-ratio", "1.5"], {}, "gpu_stage: --max-bad-ratio must be a number in (0, 1], not 1.5"),
    ("gpu_stage", ["--max-bad-ratio", "0"], {}, "gpu_stage: --max-bad-ratio must be a number in (0, 1], not 0"),
    ("gpu_stage", ["--fetch-backoff-ms", "300001"], {},
     "gpu_stage: --fetch-backoff-ms must be an integer in [0, 300000], not 300001"),
    ("gpu_stage", ["--txn-retry-backoff-ms", "0"], {},
     "gpu_stage: --txn-retry-backoff-ms must be an integer in [1, 300000], not 0"),
    ("gpu_stage", ["--batch-bytes", "0"], {}, "gpu_stage: --batch-bytes must be an integer >= 1, not 0"),
    ("gpu_stage", ["--exit-when-idle", "-1"], {}, "gpu_stage: --exit-when-idle must be a number >= 0, not -1"),
    ("gpu_stage", ["--txn-deadline", "nan"], {}, "gpu_stage: --txn-deadline must be a number > 0, not nan"),
    ("gpu_stage", ["--metrics-port", "65536"], {},
     "gpu_stage: --metrics-port must be an integer in [1, 65535], not 65536"),
    ("gpu_stage", ["--content-schema", "{tmp}/missing.json"], {},
     "gpu_stage: --content-schema {tmp}/missing.json: cannot be read (No such file or directory)"),
    ("gpu_stage", ["--kernel-cache", "{tmp}/prompts.jsonl"], {},
     "gpu_stage: --kernel-cache {tmp}/prompts.jsonl: is a file, not a folder"),
    ("gpu_stage", ["--native-threads", "0"], {}, "gpu_stage: --native-threads must be an integer >= 1, not 0"),
    ("gpu_stage", ["--consumer-config", "isolation.level=read_uncommitted"], {},
     "gpu_stage: --consumer-config cannot set isolation.level: the service sets it (refused here: bootstrap.servers, "
     "enable.auto.commit, enable.auto.offset.store, group.id, isolation.level)"),
    ("replay", ["--max-records-per-s", "0"], {}, "replay: --max-records-per-s must be a number > 0, not 0"),
    ("replay", ["--stage", "gpu"], {},
     "replay: --stage must be a comma-separated list of connector, gpu_stage (empty: any), not 'gpu'"),
    ("replay", ["--since", "yesterday"], {}, "replay: --since must be epoch ms or an ISO-8601 time, not 'yesterday'"),
    ("replay", ["--since", "2026-01-02", "--until", "2026-01-01"], {},
     "replay: --since (2026-01-02) must be before --until (2026-01-01): nothing could be selected"),
    ("replay", ["--target-topic", "a/b"], {}, f"replay: --target-topic must be {TOPIC_RULE}, not 'a/b'"),
    ("vllm_sim", ["--port", "-1"], {}, "vllm_sim: --port must be an integer in [0, 65535], not -1"),
    ("vllm_sim", ["--jitter", "1.5"], {}, "vllm_sim: --jitter must be a number in [0, 1], not 1.5"),
    ("vllm_sim", ["--rate-429", "0.7", "--rate-hang", "0.4"], {},
     "vllm_sim: --rate-429, --rate-500, --rate-503, --rate-400, --rate-hang, --rate-reset, --rate-truncate "
     "must add up to at most 1, not 1.1"),
    ("vllm_sim", ["--long-scale", "0"], {}, "vllm_sim: --long-scale must be an integer >= 1, not 0"),
    ("vllm_sim", ["--hang-s", "-3"], {}, "vllm_sim: --hang-s must be a number >= 0, not -3"),
    ("vllm_sim", ["--mix", "prose=-1"], {},
     "vllm_sim: --mix must be kind=weight,… with kinds among prose, cjk, json, fenced, invalid_json, reasoning, "
     "tool_call, long and weights >= 0 (at least one > 0), not 'prose=-1'"),
    ("stack", ["up", "--port", "65536"], {}, "stack: --port must be an integer in [0, 65535], not 65536"),
    ("stack", ["up", "--heap-mb", "64"], {}, "stack: --heap-mb must be an integer >= 128, not 64"),
    ("stack", ["up", "--gc-pause-ms", "0"], {}, "stack: --gc-pause-ms must be an integer >= 1, not 0"),
    ("stack", ["up", "--network-threads", "0"], {}, "stack: --network-threads must be an integer in [1, 64], not 0"),
    ("stack", ["up"], {"STACK_KAFKA_IO_THREADS": "65"},
     "stack: STACK_KAFKA_IO_THREADS (--io-threads) must be an integer in [1, 64], not 65"),
    ("stack", ["up", "--rebalance-delay-ms", "-1"], {}, "stack: --rebalance-delay-ms must be an integer >= 0, not -1"),
    ("stack", ["up", "--topics", "llm.raw:0"], {},
     "stack: --topics must be name:partitions,… (topic names, partitions >= 1), not 'llm.raw:0'"),
    ("jobs.model_minute", ["--parallelism", "0"], {},
     "jobs.model_minute: --parallelism must be an integer >= 1, not 0"),
    ("jobs.model_minute", ["--from", "yesterday"], {},
     "jobs.model_minute: --from must be earliest, latest, group or timestamp:<epoch ms>, not 'yesterday'"),
    ("jobs.user_risk", ["--idle-timeout", "0"], {}, "jobs.user_risk: --idle-timeout must be an integer >= 1, not 0"),
    ("jobs.user_risk", ["--until", "timestamp:soon"], {},
     "jobs.user_risk: --until must be none, latest or timestamp:<epoch ms>, not 'timestamp:soon'"),
    ("jobs.ab_arm", ["--checkpoint-interval-ms", "5"], {},
     "jobs.ab_arm: --checkpoint-interval-ms must be 0 or an integer >= 10, not 5"),
    ("jobs.ab_arm", ["--watermark-delay", "-1"], {}, "jobs.ab_arm: --watermark-delay must be an integer >= 0, not -1"),
    ("jobs.ab_arm", ["--dlq-topic", ""], {}, f"jobs.ab_arm: --dlq-topic must be {TOPIC_RULE}, not ''"),
    ("jobs.ab_arm", ["--content-schema", "{tmp}/missing.json"], {},
     "jobs.ab_arm: --content-schema {tmp}/missing.json: cannot be read (No such file or directory)"),
    ("connector", [*INPUT, "--content-schema", "{tmp}"], {},
     "connector: --content-schema {tmp}: cannot be read (Is a directory)"),
]  # fmt: skip


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No option of the commands comes from this process's environment unless a test sets it."""
    for name in list(os.environ):
        if name.startswith(ENV_PREFIXES) or name in ENV_NAMES:
            monkeypatch.delenv(name)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "prompts.jsonl").write_text('{"request_id":"r1","messages":[{"role":"user","content":"hi"}]}\n')
    return tmp_path


def _main(command: str) -> Callable[[Sequence[str]], int]:
    module = command if command.startswith("jobs.") else f"{command}.__main__"
    main: Callable[[Sequence[str]], int] = importlib.import_module(module).main
    return main


def _filled(argv: Sequence[str], tmp: Path) -> list[str]:
    return [arg.format(tmp=tmp) for arg in argv]


@pytest.mark.parametrize(
    ("command", "argv", "env", "line"), CASES, ids=[f"{c[0]}:{' '.join(c[1]) or c[2]}" for c in CASES]
)
def test_a_bad_value_is_one_line_naming_the_option_and_exit_2(
    command: str, argv: list[str], env: dict[str, str], line: str, tmp: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = _main(command)(_filled(argv, tmp))
    captured = capsys.readouterr()
    assert (code, captured.err) == (2, line.format(tmp=tmp) + "\n")


def _run(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES) and k not in ENV_NAMES}
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, env={**clean, **(env or {})}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (["connector", *INPUT, "--max-in-flight", "-1"], {},
         "connector: --max-in-flight must be an integer >= 1, not -1"),
        (["connector", *INPUT], {"CONNECTOR_MAX_IN_FLIGHT": "abc"},
         "connector: CONNECTOR_MAX_IN_FLIGHT (--max-in-flight) must be an integer >= 1, not 'abc'"),
        (["gpu_stage", "--batch-wait-ms", "0"], {}, "gpu_stage: --batch-wait-ms must be an integer >= 1, not 0"),
        (["replay", "--batch-records", "0"], {}, "replay: --batch-records must be an integer in [1, 1000000], not 0"),
        (["vllm_sim", "--port", "-1"], {}, "vllm_sim: --port must be an integer in [0, 65535], not -1"),
        (["stack", "status", "--port", "65536"], {}, "stack: --port must be an integer in [0, 65535], not 65536"),
        (["jobs.ab_arm", "--parallelism", "0"], {}, "jobs.ab_arm: --parallelism must be an integer >= 1, not 0"),
    ],
)  # fmt: skip
def test_the_command_itself_prints_one_line_and_exits_2(
    argv: list[str], env: dict[str, str], line: str, tmp: Path
) -> None:
    done = _run(_filled(argv, tmp), env)
    assert (done.returncode, done.stderr, done.stdout) == (2, line + "\n", "")


@pytest.mark.parametrize(
    ("argv", "last"),
    [
        (["connector", "--transport", "spdy"],
         "python -m connector: error: argument --transport: invalid choice: 'spdy' (choose from 'direct', 'aiohttp', "
         "'httpx')"),
        (["gpu_stage", "--batch-wait"], "python -m gpu_stage: error: argument --batch-wait-ms: expected one argument"),
        (["stack"], "python -m stack: error: the following arguments are required: command"),
        (["replay", "--no-such-option", "1"], "python -m replay: error: unrecognized arguments: --no-such-option 1"),
    ],
)  # fmt: skip
def test_argparse_errors_stay_usage_plus_one_line(argv: list[str], last: str) -> None:
    done = _run(argv)
    lines = done.stderr.splitlines()
    assert done.returncode == 2
    assert lines[0].startswith(f"usage: python -m {argv[0]} ")
    assert lines[-1] == last
    assert "Traceback" not in done.stderr


def test_a_flag_wins_over_a_refused_env_value(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from connector import settings

    monkeypatch.setenv("CONNECTOR_MAX_IN_FLIGHT", "abc")
    loaded = settings.load([*_filled(INPUT, tmp), "--max-in-flight", "5"])
    assert (loaded.max_in_flight, loaded.max_pending) == (5, 40)


def test_valid_env_values_are_typed(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from connector import settings

    monkeypatch.setenv("CONNECTOR_MAX_IN_FLIGHT", "12")
    monkeypatch.setenv("CONNECTOR_TIMEOUT_S", "2.5")
    monkeypatch.setenv("CONNECTOR_STREAM", "Yes")
    monkeypatch.setenv("CONNECTOR_INSECURE", "off")
    loaded = settings.load(_filled(INPUT, tmp))
    assert (loaded.max_in_flight, loaded.http.timeout_s, loaded.http.stream, loaded.http.insecure) == (
        12, 2.5, True, False,
    )  # fmt: skip


def test_every_command_accepts_its_defaults(tmp: Path) -> None:
    """The range types also run on argparse's string defaults: none of them may refuse a default."""
    from connector import settings as connector_settings
    from gpu_stage.settings import parse
    from jobs import cli
    from replay.__main__ import parser as replay_parser
    from replay.__main__ import settings_from
    from stack.__main__ import _parser as stack_parser
    from vllm_sim.__main__ import build_parser, config_from

    assert connector_settings.load(_filled(INPUT, tmp)).max_pending == 8 * 256
    assert parse([])[1].batch_wait_ms == 200
    assert cli.settings_from_args(parse_args(cli.parser("jobs.model_minute", None), [])).flink.parallelism == 1
    assert settings_from(parse_args(replay_parser(), [])).batch_records == 500
    assert parse_args(stack_parser(), ["up"]).topics == {"llm.requests": 4, "llm.raw": 8, "llm.dlq": 8,
                                                         "llm.features": 1}  # fmt: skip
    assert config_from(parse_args(build_parser(), [])).mix["prose"] == 3.0


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [
        (positive_int, "7", 7),
        (positive_int, " 7 ", 7),
        (non_negative_float, "0", 0.0),
        (ratio, "1", 1.0),
        (port, "65535", 65535),
        (Bounded(int, 10, or_zero=True), "0", 0),
    ],
)
def test_a_value_in_range_is_converted(kind: Bounded, text: str, value: float) -> None:
    assert kind(text) == value
    assert type(kind(text)) is kind.kind


@pytest.mark.parametrize(
    ("kind", "allowed"),
    [
        (positive_int, "an integer >= 1"),
        (non_negative_float, "a number >= 0"),
        (ratio, "a number in [0, 1]"),
        (Bounded(float, 0, 1, above=True), "a number in (0, 1]"),
        (Bounded(float, 0, above=True), "a number > 0"),
        (port, "an integer in [1, 65535]"),
        (Bounded(int, 10, or_zero=True), "0 or an integer >= 10"),
        (Bounded(float, high=2.5), "a number <= 2.5"),
    ],
)
def test_the_allowed_range_reads_the_same_everywhere(kind: Bounded, allowed: str) -> None:
    assert kind.allowed == allowed


def test_env_option_reads_the_given_environment() -> None:
    import argparse

    p = argparse.ArgumentParser(prog="x")
    env_option(p, "--count", "X_COUNT", default=3, type=positive_int, help="n", environ={"X_COUNT": "-2"})
    env_option(p, "--fine", "X_FINE", default=3, type=positive_int, help="n", environ={"X_FINE": "9"})
    with pytest.raises(ConfigError, match=r"^X_COUNT \(--count\) must be an integer >= 1, not -2$"):
        parse_args(p, [])
    assert parse_args(p, ["--count", "4"]).fine == 9
