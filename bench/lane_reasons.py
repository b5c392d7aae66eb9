"""Why the device lane left a good body to the native core: the shape outside its subset, named.

The lane's walk gives up without saying why (a kernel returns one code per row), so
:mod:`bench.lane_share` asks this module of each such body. It reads the body with Python's ``json``
and names the first shape the lane does not take, in the order the walk meets them
(:mod:`gpu_stage.transform.device.walk`, :func:`gpu_stage.transform.device.walk.compact_json`,
:mod:`gpu_stage.transform.device.content`). A shape none of these names is "another shape".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from gpu_stage.transform.device.slots import TOP_KEYS

_LANE_FLOAT = re.compile(r"-?(0|[1-9]\d*)\.\d+")
_MAX_CONTENT_OBJECTS = 3


class _Repeated(Exception):
    """A repeated key: the last value wins at the first key's position, which the lane leaves."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({k for k, _ in pairs}) != len(pairs):
        raise _Repeated
    return dict(pairs)


def _strict(text: str | bytes) -> Any:
    return json.loads(text, object_pairs_hook=_pairs, parse_float=_FloatText, parse_int=int)


class _FloatText(str):
    """A float kept as its text, so the spelling the lane takes can be checked."""

    __slots__ = ()


def _leaves(value: Any) -> Iterator[Any]:
    """Every scalar in a decoded JSON value, depth first."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _floats(value: Any) -> Iterator[str]:
    """The floats of a value decoded with :class:`_FloatText`, as spelled."""
    return (str(v) for v in _leaves(value) if isinstance(v, _FloatText))


def _object_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_object_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_object_depth(v) for v in value), default=0)
    return 0


def _lane_float(text: str) -> bool:
    """Whether :func:`gpu_stage.transform.device.walk.canonical_float` takes this float text."""
    if not _LANE_FLOAT.fullmatch(text):
        return False
    digits = text.lstrip("-").replace(".", "").strip("0")
    whole, _, fraction = text.lstrip("-").partition(".")
    tiny = whole == "0" and len(fraction) - len(fraction.lstrip("0")) >= 4 and digits != ""
    return len(digits) <= 15 and len(whole) <= 16 and not tiny


def _tool_reason(arguments: Any) -> str | None:
    if not isinstance(arguments, str) or not arguments.strip().startswith("{"):
        return None
    try:
        value = _strict(arguments)
    except _Repeated:
        return "tool arguments: a repeated key"
    except ValueError:
        return None  # not JSON: kept as sent, which the lane does
    if _object_depth(value) > _MAX_CONTENT_OBJECTS:
        return "tool arguments: objects nested more than three deep"
    if not all(_lane_float(f) for f in _floats(value)):
        return "tool arguments: a float outside the lane's spellings"
    if any(isinstance(v, int) and not -(10**18) < v < 10**18 for v in _ints(value)):
        return "tool arguments: an integer of more than 18 digits"
    return None


def _ints(value: Any) -> Iterator[int]:
    """The integers of a decoded value (not booleans)."""
    return (v for v in _leaves(value) if isinstance(v, int) and not isinstance(v, bool))


def _content_reason(content: Any) -> str | None:
    """Content JSON the lane leaves: a repeated or escaped key, a number it cannot read exactly."""
    if not isinstance(content, str):
        return None
    text = content.strip()
    if text.startswith("```"):
        text = text.partition("\n")[2].strip().removesuffix("```")
    if not text.startswith("{"):
        return None
    try:
        value = _strict(text)
    except _Repeated:
        return "content JSON: a repeated key"
    except ValueError:
        return None  # invalid JSON: the lane's verdict
    if not all(len(f.lstrip("-").replace(".", "").strip("0")) <= 15 and "e" not in f.lower() for f in _floats(value)):
        return "content JSON: a number with more digits or a larger exponent than the lane reads exactly"
    return None


def _first_message(body: dict[str, Any]) -> dict[str, Any]:
    choices = body.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    holder = choice.get("message") or choice.get("delta") or {}
    return holder if isinstance(holder, dict) else {}


def _body_reason(body: dict[str, Any]) -> str | None:
    unknown = sorted(k for k, v in body.items() if k not in TOP_KEYS and v is not None)
    if unknown:
        return f"a top-level member the lane does not copy into extra: {unknown[0]}"
    if body.get("metadata") is not None:
        return "a metadata object"
    if not isinstance(body.get("created"), int):
        return "created not an integer"
    if len(body.get("choices") or []) > 1:
        return "more than one choice"
    message = _first_message(body)
    calls = message.get("tool_calls") or []
    if calls and isinstance(calls[0], dict):
        found = _tool_reason((calls[0].get("function") or {}).get("arguments"))
        if found:
            return found
    choices = body.get("choices") or [{}]
    text = choices[0].get("text") if isinstance(choices[0], dict) else None
    return _content_reason(message.get("content", text))


def reason(value: bytes) -> str:
    """The first shape of good body ``value`` that the device lane does not take."""
    try:
        body = _strict(value)
    except _Repeated:
        return "a repeated key"
    except ValueError:
        return "another shape"
    return (_body_reason(body) if isinstance(body, dict) else None) or "another shape"
