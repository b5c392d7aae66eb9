"""Second-stage parsing of strings that carry JSON: message content and tool-call arguments.

The rules here are deliberately simple and positional (fence stripping, a first-character test, a
first-violation-wins validator) so that a columnar GPU implementation can reproduce them exactly;
``gpu_stage/transform/contract/semantics.md`` is the normative description.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from llmpipe.errors import ConfigError

JSON_WS = " \t\n\r"
FENCE = "```"
INVALID_JSON = "invalid_json"
NOT_AN_OBJECT = "not_an_object"

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def json_candidate(text: str) -> str | None:
    """The JSON text inside ``text`` if it looks like JSON, else None (prose).

    Whitespace is JSON whitespace only. A text starting with a fence (```json, ```JSON, bare ```, any
    info string) loses its first line and, if present, the closing fence at its end.
    """
    body = text.strip(JSON_WS)
    if body.startswith(FENCE):
        newline = body.find("\n")
        body = "" if newline < 0 else body[newline + 1 :]
        body = body.rstrip(JSON_WS)
        if body.endswith(FENCE):
            body = body[: -len(FENCE)]
        body = body.strip(JSON_WS)
    if body[:1] in ("{", "["):
        return body
    return None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, float) or _is_int(v)


def _as_integer(v: Any) -> int | None:
    """JSON Schema ``integer``: an int, or a float with no fractional part, within int64."""
    if _is_int(v) or (isinstance(v, float) and math.isfinite(v) and v.is_integer()):
        out = int(v)
    else:
        return None
    return out if _INT64_MIN <= out <= _INT64_MAX else None


Coerce = Callable[[Any], tuple[bool, Any]]


def _coerce_string(v: Any) -> tuple[bool, Any]:
    return isinstance(v, str), v


def _coerce_number(v: Any) -> tuple[bool, Any]:
    return (True, float(v)) if _is_number(v) else (False, None)


def _coerce_integer(v: Any) -> tuple[bool, Any]:
    out = _as_integer(v)
    return out is not None, out


def _coerce_boolean(v: Any) -> tuple[bool, Any]:
    return isinstance(v, bool), v


_COERCE: dict[str, Coerce] = {
    "string": _coerce_string,
    "number": _coerce_number,
    "integer": _coerce_integer,
    "boolean": _coerce_boolean,
}


@dataclass(frozen=True, slots=True)
class _Property:
    """A compiled property check: its name, scalar type, enum, bounds, and item type for arrays."""

    name: str
    coerce: Coerce | None
    item_coerce: Coerce | None
    enum: tuple[Any, ...] | None
    minimum: float | None
    maximum: float | None

    def check(self, value: Any) -> tuple[str | None, Any]:
        """``(error code or None, typed value)`` for one property value."""
        if self.item_coerce is not None:
            if not isinstance(value, list):
                return f"type:{self.name}", None
            items = []
            for item in value:
                ok, typed = self.item_coerce(item)
                if not ok:
                    return f"items:{self.name}", None
                items.append(typed)
            return None, items
        assert self.coerce is not None
        ok, typed = self.coerce(value)
        if not ok:
            return f"type:{self.name}", None
        if self.enum is not None and typed not in self.enum:
            return f"enum:{self.name}", None
        if self.minimum is not None and typed < self.minimum:
            return f"minimum:{self.name}", None
        if self.maximum is not None and typed > self.maximum:
            return f"maximum:{self.name}", None
        return None, typed


def _compile_property(name: str, prop: Mapping[str, Any]) -> _Property:
    kind = prop.get("type")
    if kind == "array":
        item_kind = prop.get("items", {}).get("type")
        if item_kind not in _COERCE:
            msg = f"content schema property {name!r}: unsupported array item type {item_kind!r}"
            raise ConfigError(msg)
        return _Property(name, None, _COERCE[item_kind], None, None, None)
    if not isinstance(kind, str) or kind not in _COERCE:
        msg = f"content schema property {name!r}: unsupported type {kind!r}"
        raise ConfigError(msg)
    for bound in ("minimum", "maximum"):
        if bound in prop and (kind not in ("number", "integer") or not _is_number(prop[bound])):
            msg = f"content schema property {name!r}: {bound} needs a numeric type and a numeric bound"
            raise ConfigError(msg)
    enum = prop.get("enum")
    return _Property(
        name,
        _COERCE[kind],
        None,
        tuple(enum) if isinstance(enum, list) else None,
        prop.get("minimum"),
        prop.get("maximum"),
    )


class ContentValidator:
    """A validator compiled from the content JSON Schema's supported subset.

    Supported keywords: ``type`` (string, number, integer, boolean, array of those), ``enum``,
    ``minimum``/``maximum`` (inclusive), ``required``, ``additionalProperties: false``, ``items``.
    The first violation wins, in this order: required properties (in ``required`` order), then
    unknown keys (in body order, only with ``additionalProperties: false``), then each present
    property in schema order (type, enum, minimum, maximum, items).
    """

    def __init__(self, schema: Mapping[str, Any]) -> None:
        """Compile ``schema`` once; per-record validation then does no schema lookups."""
        props = schema.get("properties")
        if schema.get("type") != "object" or not isinstance(props, dict):
            msg = "content schema must be an object with properties"
            raise ConfigError(msg)
        self._props = tuple(_compile_property(name, p) for name, p in props.items())
        self._names = frozenset(props)
        self._required = tuple(schema.get("required", ()))
        self._closed = schema.get("additionalProperties") is False

    @classmethod
    def of(cls, schema: Mapping[str, Any]) -> ContentValidator:
        """The validator of ``schema``, compiled once per process however many backends ask (it holds no state)."""
        return _compiled(json.dumps(schema, sort_keys=True))

    def validate(self, value: Any) -> tuple[str | None, dict[str, Any] | None]:
        """``(None, typed row)`` when ``value`` satisfies the schema, else ``(error code, None)``."""
        if not isinstance(value, dict):
            return NOT_AN_OBJECT, None
        for name in self._required:
            if name not in value:
                return f"missing:{name}", None
        if self._closed:
            for key in value:
                if key not in self._names:
                    return f"additional:{key}", None
        row: dict[str, Any] = {}
        for prop in self._props:
            if prop.name not in value:
                continue
            error, typed = prop.check(value[prop.name])
            if error is not None:
                return error, None
            row[prop.name] = typed
        return None, row


def parse_content(text: str, validator: ContentValidator) -> tuple[bool | None, str | None, Any]:
    """``(content_valid, content_error, content row)`` for a first choice's content text."""
    candidate = json_candidate(text)
    if candidate is None:
        return None, None, None
    try:
        value = orjson.loads(candidate)
    except orjson.JSONDecodeError:
        return False, INVALID_JSON, None
    error, row = validator.validate(value)
    if error is not None:
        return False, error, None
    return True, None, row


def parse_tool_arguments(arguments: Any) -> tuple[str | None, bool | None]:
    """``(tool_arguments, tool_arguments_valid)`` for a first tool call's ``function.arguments``.

    A string holding a JSON object becomes its compact re-serialization (valid); any other string
    is kept as sent (invalid). A non-string value is serialized (valid only if it is an object).
    Null stays null. Objects nested deeper than 254 levels count as invalid (kept as sent, or null).
    """
    if arguments is None:
        return None, None
    if not isinstance(arguments, str):
        return _compact(arguments), isinstance(arguments, dict)
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments, False
    if isinstance(value, dict):
        text = _compact(value)
        return (arguments, False) if text is None else (text, True)
    return arguments, False


def _compact(value: Any) -> str | None:
    """Compact JSON text, or None when nesting exceeds the serializer's 254 levels."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return None


@functools.lru_cache(maxsize=8)
def _compiled(schema_text: str) -> ContentValidator:
    return ContentValidator(json.loads(schema_text))
