"""The connector's one frozen settings object, filled from CLI options that fall back to env vars."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from connector.http import HttpOptions
from connector.retry import RetryPolicy
from llmpipe.content_schema import load_content_schema
from llmpipe.errors import ConfigError
from llmpipe.kafka_io import KafkaSettings
from llmpipe.runtime import logging_spec
from llmpipe.settings import (
    Bounded,
    Checked,
    Secret,
    check_kafka_options,
    env_option,
    non_empty,
    non_negative_float,
    non_negative_int,
    parse_args,
    port,
    positive_float,
    positive_int,
    require_file,
    topic_name,
)

MIN_RECORD_BYTES = 16 * 1024
"""Least ``--max-record-bytes``: a dead letter's headers (its error text alone may take 1,000 bytes, and
the input's path or topic) must fit in a record, with some of the original value."""


def _http_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        msg = "not an http(s) URL"
        raise ValueError(msg)
    _ = parts.port  # ValueError for a port that is not a number in 0-65535
    return text


def _schema_name(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", text):
        msg = "not a schema name"
        raise ValueError(msg)
    return text


http_url = Checked("an http:// or https:// URL with a host", _http_url)
schema_name = Checked("1-64 letters, digits, '_' or '-' (as response_format names go)", _schema_name)
record_bytes = Bounded(int, MIN_RECORD_BYTES)


@dataclass(frozen=True)
class ConnectorSettings:
    """Everything ``python -m connector`` needs; built once in ``main``."""

    kafka: KafkaSettings
    http: HttpOptions
    retry: RetryPolicy
    model: str
    input_topic: str | None
    input_file: str | None
    group_id: str
    raw_topic: str
    dlq_topic: str
    state_topic: str
    transactional_id: str
    max_in_flight: int
    max_pending: int
    commit_interval_s: float
    max_txn_records: int
    drain_timeout_s: float
    max_request_bytes: int
    max_record_bytes: int
    content_schema: dict[str, Any] | None
    """The content JSON Schema sent as ``response_format`` (``--content-schema``); None sends none."""
    schema_name: str
    metrics_port: int | None
    metrics_host: str
    log_level: str

    @property
    def source_id(self) -> str:
        """Key of this input's position in the state topic (file input)."""
        return f"{self.transactional_id}:{self.input_file}"


def _env_name(flag: str) -> str:
    return "CONNECTOR_" + flag.lstrip("-").upper().replace("-", "_")


def _opt(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str, *, old_flags: Sequence[str] = (), **kw: Any
) -> None:
    """:func:`env_option` with the variable named after the flag; an old flag's variable stays honoured too."""
    env_option(parser, flag, _env_name(flag), old_flags=old_flags, old_envs=[_env_name(f) for f in old_flags], **kw)


def build_parser() -> argparse.ArgumentParser:
    """All options; each falls back to ``CONNECTOR_<OPTION>`` (Kafka ones to the shared ``KAFKA_*``).

    ``--content-schema`` was ``--json-schema`` (``CONNECTOR_JSON_SCHEMA``): both old names still work,
    with a warning, so a deployment that sets them keeps sending its schema.
    """
    p = argparse.ArgumentParser(prog="python -m connector", description="Prompts → vLLM → llm.raw / llm.dlq.")
    src = p.add_argument_group("input (one of)")
    _opt(src, "--input-topic", type=topic_name, help="Kafka topic of requests (consumer group input)")
    _opt(src, "--input-file", help="JSONL file of requests; '-' reads stdin")
    _opt(src, "--group-id", default="llmpipe-connector", type=non_empty, help="consumer group of --input-topic")
    out = p.add_argument_group("output")
    _opt(out, "--raw-topic", default="llm.raw", type=topic_name, help="topic of response bodies")
    _opt(out, "--dlq-topic", default="llm.dlq", type=topic_name, help="dead-letter topic")
    _opt(
        out,
        "--state-topic",
        default="llm.connector.state",
        type=topic_name,
        help="committed progress of each input partition (compacted)",
    )
    _opt(out, "--transactional-id", default="llmpipe-connector-0", type=non_empty, help="stable id of this instance")
    http = p.add_argument_group("HTTP")
    _opt(http, "--url", default="http://127.0.0.1:8000/v1/chat/completions", type=http_url, help="vLLM endpoint")
    _opt(http, "--model", default="llmpipe/sim-8b", type=non_empty, help="model for requests that name none")
    _opt(http, "--api-key", help="bearer token (prefer the env var)", shown="secret")
    _opt(http, "--timeout-s", default=60.0, type=positive_float, help="per-attempt timeout (> 0)")
    _opt(http, "--connect-timeout-s", default=5.0, type=positive_float, help="connect timeout (> 0)")
    _opt(http, "--max-attempts", default=4, type=positive_int, help="attempts per request incl. the first (>= 1)")
    _opt(http, "--backoff-base-s", default=0.5, type=non_negative_float, help="first backoff (>= 0)")
    _opt(http, "--backoff-max-s", default=8.0, type=non_negative_float, help="backoff cap (>= 0)")
    _opt(http, "--max-retry-after-s", default=60.0, type=non_negative_float,
         help="longest Retry-After honoured (>= 0)")  # fmt: skip
    _opt(http, "--stream", action="store_true", default=False, help="capture via SSE, reassembled")
    _opt(http, "--content-schema", old_flags=["--json-schema"],
         help="content JSON Schema file sent as response_format json_schema (unset: none)")  # fmt: skip
    _opt(http, "--schema-name", default="content", type=schema_name, help="name of the schema in response_format")
    _opt(http, "--ca-file", help="CA bundle for an https endpoint")
    _opt(http, "--client-cert", help="client certificate (PEM)")
    _opt(http, "--client-key", help="client key (PEM)")
    _opt(http, "--insecure", action="store_true", default=False, help="skip TLS verification")
    _opt(
        http,
        "--transport",
        default="direct",
        choices=["direct", "aiohttp", "httpx"],
        help="direct: aiohttp session; aiohttp: httpx over the aiohttp transport; httpx: httpx's own pool",
    )
    flow = p.add_argument_group("flow")
    _opt(flow, "--max-in-flight", default=256, type=positive_int, help="concurrent HTTP calls (>= 1)")
    _opt(flow, "--max-pending", default=0, type=non_negative_int, help="read-but-uncommitted cap (0: 8 x in-flight)")
    _opt(
        flow,
        "--commit-interval-ms",
        default=50,
        type=non_negative_int,
        help="least time between two transactions' starts (finished calls are committed at the next one)",
    )
    _opt(flow, "--max-txn-records", default=5000, type=positive_int, help="records per transaction (>= 1)")
    _opt(flow, "--drain-timeout-s", default=30.0, type=non_negative_float, help="on SIGTERM, wait this long for calls")
    _opt(flow, "--max-request-bytes", default=1_000_000, type=positive_int,
         help="larger input lines → DLQ too_large")  # fmt: skip
    _opt(
        flow,
        "--max-record-bytes",
        default=1_000_000,
        type=record_bytes,
        help=f"largest raw/DLQ record (body + key + headers); larger replies → DLQ too_large (>= {MIN_RECORD_BYTES})",
    )
    _opt(p, "--metrics-port", type=port, help="serve Prometheus metrics on this port (1-65535; unset: none)")
    _opt(p, "--metrics-host", default="127.0.0.1", type=non_empty,
         help="address the metrics server binds (0.0.0.0 in containers)")  # fmt: skip
    _opt(p, "--log-level", default="INFO", type=logging_spec, help="logging level, then any logger=LEVEL")
    KafkaSettings.add_options(p, "CONNECTOR")
    return p


def _schema(path: str | None) -> dict[str, Any] | None:
    """The content schema to send, checked by the rules gpu_stage and the simulator hold it to."""
    return load_content_schema(path, "--content-schema") if path else None


def _check_files(args: argparse.Namespace) -> None:
    """Files named by options exist now, rather than failing at the first read or TLS handshake."""
    if bool(args.input_topic) == bool(args.input_file):
        msg = "give exactly one of --input-topic / --input-file"
        raise ConfigError(msg)
    if args.input_file != "-":
        require_file(args.input_file, "--input-file")
    require_file(args.ca_file, "--ca-file")
    require_file(args.client_cert, "--client-cert")
    require_file(args.client_key, "--client-key")
    if args.client_key and not args.client_cert:
        msg = "--client-key needs --client-cert (the key of which certificate?)"
        raise ConfigError(msg)
    check_kafka_options(args)


def from_args(args: argparse.Namespace) -> ConnectorSettings:
    """Validate and freeze the parsed options (ranges were checked as they were parsed)."""
    _check_files(args)
    http = HttpOptions(
        url=args.url,
        api_key=Secret(args.api_key or ""),
        timeout_s=args.timeout_s,
        connect_timeout_s=args.connect_timeout_s,
        max_connections=args.max_in_flight,
        stream=args.stream,
        ca_file=args.ca_file,
        client_cert=args.client_cert,
        client_key=args.client_key,
        insecure=args.insecure,
        transport=args.transport,
    )
    retry = RetryPolicy(args.max_attempts, args.backoff_base_s, args.backoff_max_s, args.max_retry_after_s)
    return ConnectorSettings(
        kafka=KafkaSettings.from_args(args),
        http=http,
        retry=retry,
        model=args.model,
        input_topic=args.input_topic,
        input_file=args.input_file,
        group_id=args.group_id,
        raw_topic=args.raw_topic,
        dlq_topic=args.dlq_topic,
        state_topic=args.state_topic,
        transactional_id=args.transactional_id,
        max_in_flight=args.max_in_flight,
        max_pending=args.max_pending or 8 * args.max_in_flight,
        commit_interval_s=args.commit_interval_ms / 1000,
        max_txn_records=args.max_txn_records,
        drain_timeout_s=args.drain_timeout_s,
        max_request_bytes=args.max_request_bytes,
        max_record_bytes=args.max_record_bytes,
        content_schema=_schema(args.content_schema),
        schema_name=args.schema_name,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        log_level=args.log_level,
    )


def load(argv: Sequence[str] | None = None) -> ConnectorSettings:
    """Parse ``argv`` and build the settings."""
    return from_args(parse_args(build_parser(), argv))
