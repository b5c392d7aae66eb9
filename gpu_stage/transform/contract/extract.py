"""Body → typed values for one parsed vLLM body: the reference semantics of the transform.

The CPU backend runs this per record after ``orjson.loads``; the GPU backend implements the same
rules column-wise and is tested against it. Checks run in a fixed order and the first failure decides
the dead letter's reason and text (``gpu_stage/transform/contract/semantics.md`` lists the order).
"""

from __future__ import annotations

from typing import Any

import orjson

from gpu_stage.transform.contract.content import ContentValidator, parse_content, parse_tool_arguments
from gpu_stage.transform.contract.created import CreatedError, created_ms
from llmpipe.dlq import Reason

OBJECTS = frozenset({"chat.completion", "chat.completion.chunk", "text_completion"})
TYPED_KEYS = frozenset(
    {"id", "object", "created", "model", "choices", "usage", "system_fingerprint", "service_tier", "metadata"}
)
IGNORED_KEYS = frozenset({"prompt_logprobs", "prompt_token_ids"})
"""Per-token diagnostics that can reach megabytes: neither typed nor copied into ``extra``."""
NOT_EXTRA = TYPED_KEYS | IGNORED_KEYS

_ID, _OBJECT, _CHOICES = "id", "object", "choices"
_UNSUPPORTED_OBJECT = "object: unsupported value"
UPSTREAM_ERROR_TEXT = "upstream error body"

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

BODY_FIELDS = (
    "completion_id",
    "object",
    "created",
    "model",
    "finish_reason",
    "stop_reason",
    "content_text",
    "reasoning",
    "tool_name",
    "tool_arguments",
    "tool_arguments_valid",
    "num_choices",
    "choices",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cached_tokens",
    "system_fingerprint",
    "service_tier",
    "metadata",
    "extra",
    "content",
    "content_valid",
    "content_error",
)
"""Typed columns that come from the body, in the order :func:`extract` returns them."""


class BadBody(Exception):
    """A body that becomes a dead letter; carries the reason code and the deterministic text."""

    def __init__(self, reason: Reason, text: str) -> None:
        """Remember why the body is bad."""
        super().__init__(text)
        self.reason = reason
        self.text = text


def json_type(v: Any) -> str:
    """JSON name of a decoded value's type, used in error texts."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _wrong(path: str, expected: str, v: Any) -> BadBody:
    return BadBody(Reason.WRONG_TYPE, f"{path}: expected {expected}, got {json_type(v)}")


def _string(obj: dict[str, Any], key: str, path: str) -> str | None:
    v = obj.get(key)
    if v is None or type(v) is str:
        return v
    raise _wrong(path, "string", v)


def _integer(obj: dict[str, Any], key: str, path: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int | None:
    v = obj.get(key)
    if v is None:
        return None
    if type(v) is int and lo <= v <= hi:
        return v
    raise _wrong(path, "integer", v)


def _object(obj: dict[str, Any], key: str, path: str) -> dict[str, Any] | None:
    v = obj.get(key)
    if v is None or type(v) is dict:
        return v
    raise _wrong(path, "object", v)


def _required(obj: dict[str, Any], key: str) -> Any:
    v = obj.get(key)
    if v is None:
        raise BadBody(Reason.MISSING_FIELD, f"{key}: missing")
    return v


def is_error_body(obj: dict[str, Any]) -> bool:
    """Flat ``{"object": "error", ...}`` or nested ``{"error": ...}`` (any non-null ``error``)."""
    return obj.get("object") == "error" or obj.get("error") is not None


MAX_COPY_DEPTH = 254
"""Deepest nesting a value copied as JSON text may have (orjson's serializer limit)."""


def json_text(v: Any, path: str) -> str:
    """Compact JSON text (orjson spelling) of a decoded value found at ``path``."""
    try:
        return orjson.dumps(v).decode()
    except TypeError as exc:
        text = f"{path}: nesting deeper than {MAX_COPY_DEPTH} levels"
        raise BadBody(Reason.INVALID_JSON, text) from exc


def string_map(obj: dict[str, Any], path: str) -> dict[str, str | None]:
    """An object as a string map: strings as they are, other values as compact JSON text."""
    return {k: v if type(v) is str else json_text(v, f"{path}.{k}") for k, v in obj.items()}


def _stop_reason(choice: dict[str, Any], path: str) -> str | None:
    v = choice.get("stop_reason")
    if v is None or type(v) is str:
        return v
    if type(v) is int:
        return str(v)
    raise _wrong(path, "integer or string", v)


def _choice_row(choice: Any, i: int) -> tuple[dict[str, Any], dict[str, Any] | None, str | None, str]:
    """One ``choices[i]`` entry: its typed row, the message/delta object, its text, and its path."""
    path = f"choices[{i}]"
    if type(choice) is not dict:
        raise _wrong(path, "object", choice)
    index = _integer(choice, "index", f"{path}.index", INT32_MIN, INT32_MAX)
    finish = _string(choice, "finish_reason", f"{path}.finish_reason")
    message: dict[str, Any] | None = None
    if "message" in choice:
        message = _object(choice, "message", f"{path}.message")
        mpath = f"{path}.message"
    elif "delta" in choice:
        message = _object(choice, "delta", f"{path}.delta")
        mpath = f"{path}.delta"
    else:
        mpath = path
    if message is not None:
        text = _string(message, "content", f"{mpath}.content")
    elif mpath == path:
        text = _string(choice, "text", f"{path}.text")
    else:
        text = None
    return {"index": index, "finish_reason": finish, "content": text}, message, text, mpath


def _first_tool(message: dict[str, Any], mpath: str) -> tuple[str | None, str | None, bool | None]:
    calls = message.get("tool_calls")
    if calls is None:
        return None, None, None
    if type(calls) is not list:
        raise _wrong(mpath + ".tool_calls", "array", calls)
    if not calls:
        return None, None, None
    first = calls[0]
    if type(first) is not dict:
        raise _wrong(mpath + ".tool_calls[0]", "object", first)
    function = _object(first, "function", f"{mpath}.tool_calls[0].function")
    if function is None:
        return None, None, None
    name = _string(function, "name", f"{mpath}.tool_calls[0].function.name")
    arguments, valid = parse_tool_arguments(function.get("arguments"))
    return name, arguments, valid


def _reasoning(message: dict[str, Any], mpath: str) -> str | None:
    value = _string(message, "reasoning", f"{mpath}.reasoning")
    if value is None:
        value = _string(message, "reasoning_content", f"{mpath}.reasoning_content")
    return value


def _usage(obj: dict[str, Any]) -> tuple[int | None, int | None, int | None, int | None]:
    usage = _object(obj, "usage", "usage")
    if usage is None:
        return None, None, None, None
    details = _object(usage, "prompt_tokens_details", "usage.prompt_tokens_details")
    cached = None
    if details is not None:
        cached = _integer(details, "cached_tokens", "usage.prompt_tokens_details.cached_tokens")
    return (
        _integer(usage, "prompt_tokens", "usage.prompt_tokens"),
        _integer(usage, "completion_tokens", "usage.completion_tokens"),
        _integer(usage, "total_tokens", "usage.total_tokens"),
        cached,
    )


def _envelope(obj: dict[str, Any]) -> tuple[str, str, int, list[Any]]:
    """The required fields, checked in order: id, object, created, choices."""
    completion_id = _required(obj, "id")
    if type(completion_id) is not str:
        raise _wrong(_ID, "string", completion_id)
    kind = _required(obj, "object")
    if type(kind) is not str:
        raise _wrong(_OBJECT, "string", kind)
    if kind not in OBJECTS:
        raise BadBody(Reason.WRONG_TYPE, _UNSUPPORTED_OBJECT)
    try:
        created = created_ms(_required(obj, "created"))
    except CreatedError as exc:
        raise BadBody(Reason.WRONG_TYPE, str(exc)) from exc
    choices = _required(obj, "choices")
    if type(choices) is not list:
        raise _wrong(_CHOICES, "array", choices)
    return completion_id, kind, created, choices


def extract(obj: dict[str, Any], validator: ContentValidator) -> tuple[Any, ...]:
    """Typed values of :data:`BODY_FIELDS` for one decoded body, or raise :class:`BadBody`."""
    if is_error_body(obj):
        raise BadBody(Reason.UPSTREAM_ERROR, UPSTREAM_ERROR_TEXT)
    completion_id, kind, created, choices = _envelope(obj)
    model = _string(obj, "model", "model")
    rows = []
    first_message: dict[str, Any] | None = None
    first_text: str | None = None
    first_path = ""
    for i, choice in enumerate(choices):
        row, message, text, mpath = _choice_row(choice, i)
        rows.append(row)
        if i == 0:
            first_message, first_text, first_path = message, text, mpath
    finish = stop = reasoning = tool_name = tool_args = None
    tool_valid = None
    if rows:
        finish = rows[0]["finish_reason"]
        stop = _stop_reason(choices[0], "choices[0].stop_reason")
        if first_message is not None:
            reasoning = _reasoning(first_message, first_path)
            tool_name, tool_args, tool_valid = _first_tool(first_message, first_path)
    prompt, completion, total, cached = _usage(obj)
    fingerprint = _string(obj, "system_fingerprint", "system_fingerprint")
    tier = _string(obj, "service_tier", "service_tier")
    meta_obj = _object(obj, "metadata", "metadata")
    metadata = None if meta_obj is None else string_map(meta_obj, "metadata")
    extra = {k: json_text(v, k) for k, v in obj.items() if k not in NOT_EXTRA and v is not None}
    valid = error = content = None
    if first_text is not None:
        valid, error, content = parse_content(first_text, validator)
    return (
        completion_id, kind, created, model, finish, stop, first_text, reasoning, tool_name, tool_args,
        tool_valid, len(rows), rows, prompt, completion, total, cached, fingerprint, tier, metadata,
        extra, content, valid, error,
    )  # fmt: skip
