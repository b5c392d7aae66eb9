"""Turn one input record (a JSON object) into an HTTP request body, or a dead letter with a reason.

Contract (design §3, llm.requests): ``request_id`` (non-empty string), ``messages`` (non-empty list),
optional ``model`` (string), ``params`` (object merged into the body), ``attributes`` (string map).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from llmpipe.dlq import STAGE_CONNECTOR, Reason

STAGE = STAGE_CONNECTOR


@dataclass(frozen=True, slots=True)
class Request:
    """A valid request, with its HTTP body already encoded."""

    request_id: str
    model: str
    body: bytes
    attributes: bytes


@dataclass(frozen=True, slots=True)
class Rejected:
    """Why an input record cannot become a request."""

    reason: Reason
    error: str
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class BodyOptions:
    """What the connector adds to every body: default model, response_format, streaming."""

    model: str
    response_format: dict[str, Any] | None = None
    stream: bool = False
    max_bytes: int = 1_000_000


def response_format(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """``response_format`` for vLLM structured outputs from the one content schema (design §4)."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def _non_empty_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 0


def _optional_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _optional_object(value: Any) -> bool:
    return value is None or isinstance(value, dict)


def _optional_string_map(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and all(isinstance(x, str) for x in value.values()))


_CHECKS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("messages", _non_empty_list, "a non-empty list"),
    ("model", _optional_str, "a string"),
    ("params", _optional_object, "an object"),
    ("attributes", _optional_string_map, "a string map"),
)


def _check(obj: Any) -> Rejected | None:
    if not isinstance(obj, dict):
        return Rejected(Reason.NOT_AN_OBJECT, f"expected a JSON object, got {type(obj).__name__}")
    rid = obj.get("request_id")
    if rid is None or rid == "":
        return Rejected(Reason.MISSING_FIELD, "request_id is required")
    if not isinstance(rid, str):
        return Rejected(Reason.WRONG_TYPE, "request_id must be a string")
    for name, ok, what in _CHECKS:
        if name == "messages" and name not in obj:
            return Rejected(Reason.MISSING_FIELD, "messages is required", rid)
        if not ok(obj.get(name)):
            return Rejected(Reason.WRONG_TYPE, f"{name} must be {what}", rid)
    return None


def parse(raw: bytes | None, options: BodyOptions) -> Request | Rejected:
    """Validate one input record and build the body sent to vLLM."""
    if raw is None or raw.strip() == b"":
        return Rejected(Reason.INVALID_JSON, "empty record")
    if len(raw) > options.max_bytes:
        return Rejected(Reason.TOO_LARGE, f"{len(raw)} bytes > limit {options.max_bytes}")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        reason = Reason.INVALID_UTF8 if "utf-8" in str(exc).lower() else Reason.INVALID_JSON
        return Rejected(reason, str(exc))
    problem = _check(obj)
    if problem is not None:
        return problem
    model = obj.get("model") or options.model
    body: dict[str, Any] = {"model": model, "messages": obj["messages"], **(obj.get("params") or {})}
    if options.response_format is not None:
        body["response_format"] = options.response_format
    if options.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    attributes = orjson.dumps(obj.get("attributes") or {})
    return Request(obj["request_id"], model, orjson.dumps(body), attributes)
