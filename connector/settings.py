"""The connector's one frozen settings object, filled from CLI options that fall back to env vars."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connector.http import HttpOptions
from connector.retry import RetryPolicy
from llmpipe.errors import ConfigError
from llmpipe.kafka_io import KafkaSettings
from llmpipe.settings import Secret, env_option, parse_args


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
    json_schema: dict[str, Any] | None
    schema_name: str
    metrics_port: int | None
    metrics_host: str
    log_level: str

    @property
    def source_id(self) -> str:
        """Key of this input's position in the state topic (file input)."""
        return f"{self.transactional_id}:{self.input_file}"


def _opt(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str, **kw: Any) -> None:
    env = "CONNECTOR_" + flag.lstrip("-").upper().replace("-", "_")
    env_option(parser, flag, env, **kw)


def build_parser() -> argparse.ArgumentParser:
    """All options; each falls back to ``CONNECTOR_<OPTION>`` (Kafka ones to ``KAFKA_*``)."""
    p = argparse.ArgumentParser(prog="python -m connector", description="Prompts → vLLM → llm.raw / llm.dlq.")
    src = p.add_argument_group("input (one of)")
    _opt(src, "--input-topic", help="Kafka topic of requests (consumer group input)")
    _opt(src, "--input-file", help="JSONL file of requests; '-' reads stdin")
    _opt(src, "--group-id", default="llmpipe-connector", help="consumer group of --input-topic")
    out = p.add_argument_group("output")
    _opt(out, "--raw-topic", default="llm.raw", help="topic of response bodies")
    _opt(out, "--dlq-topic", default="llm.dlq", help="dead-letter topic")
    _opt(
        out,
        "--state-topic",
        default="llm.connector.state",
        help="committed progress of each input partition (compacted)",
    )
    _opt(out, "--transactional-id", default="llmpipe-connector-0", help="stable id of this instance")
    http = p.add_argument_group("HTTP")
    _opt(http, "--url", default="http://127.0.0.1:8000/v1/chat/completions", help="vLLM endpoint")
    _opt(http, "--model", default="llmpipe/sim-8b", help="model for requests that name none")
    _opt(http, "--api-key", help="bearer token (prefer the env var)", shown="secret")
    _opt(http, "--timeout-s", default=60.0, type=float, help="per-attempt timeout")
    _opt(http, "--connect-timeout-s", default=5.0, type=float, help="connect timeout")
    _opt(http, "--max-attempts", default=4, type=int, help="attempts per request incl. the first")
    _opt(http, "--backoff-base-s", default=0.5, type=float, help="first backoff")
    _opt(http, "--backoff-max-s", default=8.0, type=float, help="backoff cap")
    _opt(http, "--max-retry-after-s", default=60.0, type=float, help="longest Retry-After honoured")
    _opt(http, "--stream", action="store_true", default=False, help="capture via SSE, reassembled")
    _opt(http, "--json-schema", help="content JSON Schema sent as response_format json_schema")
    _opt(http, "--schema-name", default="content", help="name of the schema in response_format")
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
    _opt(flow, "--max-in-flight", default=256, type=int, help="concurrent HTTP calls")
    _opt(flow, "--max-pending", default=0, type=int, help="read-but-uncommitted cap (0: 8 x in-flight)")
    _opt(
        flow,
        "--commit-interval-ms",
        default=50,
        type=int,
        help="least time between two transactions' starts (finished calls are committed at the next one)",
    )
    _opt(flow, "--max-txn-records", default=5000, type=int, help="records per transaction")
    _opt(flow, "--drain-timeout-s", default=30.0, type=float, help="on SIGTERM, wait this long for calls")
    _opt(flow, "--max-request-bytes", default=1_000_000, type=int, help="larger input lines → DLQ too_large")
    _opt(
        flow,
        "--max-record-bytes",
        default=1_000_000,
        type=int,
        help="largest raw/DLQ record (body + key + headers); larger replies → DLQ too_large",
    )
    _opt(p, "--metrics-port", type=int, help="serve Prometheus metrics on this port")
    _opt(p, "--metrics-host", default="127.0.0.1", help="address the metrics server binds (0.0.0.0 in containers)")
    _opt(p, "--log-level", default="INFO", help="logging level")
    KafkaSettings.add_options(p, "CONNECTOR")
    return p


def _schema(path: str | None) -> dict[str, Any] | None:
    if not path:
        return None
    try:
        loaded = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        msg = f"cannot read JSON schema {path}: {exc}"
        raise ConfigError(msg) from exc
    if not isinstance(loaded, dict):
        msg = f"JSON schema {path} is not an object"
        raise ConfigError(msg)
    return loaded


def from_args(args: argparse.Namespace) -> ConnectorSettings:
    """Validate and freeze the parsed options."""
    if bool(args.input_topic) == bool(args.input_file):
        msg = "give exactly one of --input-topic / --input-file"
        raise ConfigError(msg)
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
        json_schema=_schema(args.json_schema),
        schema_name=args.schema_name,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        log_level=args.log_level,
    )


def load(argv: Sequence[str] | None = None) -> ConnectorSettings:
    """Parse ``argv`` and build the settings."""
    return from_args(parse_args(build_parser(), argv))
