"""Generate a JSON value valid for a JSON Schema, as guided decoding in vLLM would.

Covers the subset structured outputs use in practice: objects with properties/required, enums and
const, strings with length bounds, numbers and integers within (exclusive) bounds, arrays with item
schemas and size bounds, booleans, null, type lists and anyOf/oneOf.
"""

from __future__ import annotations

import random
from typing import Any

from vllm_sim.words import words

_MAX_DEPTH = 6


def generate(schema: dict[str, Any], rng: random.Random, depth: int = 0) -> Any:
    """Return a value that ``schema`` accepts."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    for combinator in ("anyOf", "oneOf"):
        if combinator in schema:
            return generate(rng.choice(schema[combinator]), rng, depth + 1)
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part)
        return generate(merged, rng, depth + 1)
    kind = _pick_type(schema, rng)
    return _GENERATORS[kind](schema, rng, depth)


def _pick_type(schema: dict[str, Any], rng: random.Random) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        non_null = [k for k in kind if k != "null"] or ["null"]
        return str(rng.choice(non_null))
    if kind is None:
        return "object" if "properties" in schema else "string"
    return str(kind)


def _object(schema: dict[str, Any], rng: random.Random, depth: int) -> dict[str, Any]:
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if name in required or (depth < _MAX_DEPTH and rng.random() < 0.7):
            out[name] = generate(sub, rng, depth + 1)
    return out


def _string(schema: dict[str, Any], rng: random.Random, _depth: int) -> str:
    low = int(schema.get("minLength", 1))
    high = int(schema.get("maxLength", max(low, 40)))
    text = words(rng, rng.randint(1, 6))
    while len(text) < low:
        text += " " + words(rng, 3)
    return text[:high] if len(text) > high else text


def _bounds(schema: dict[str, Any], default_low: float, default_high: float) -> tuple[float, float]:
    low = float(schema.get("minimum", schema.get("exclusiveMinimum", default_low)))
    high = float(schema.get("maximum", schema.get("exclusiveMaximum", default_high)))
    return low, max(low, high)


def _number(schema: dict[str, Any], rng: random.Random, _depth: int) -> float:
    low, high = _bounds(schema, 0.0, 1000.0)
    value = round(rng.uniform(low, high), 4)
    excl_low = "exclusiveMinimum" in schema and value <= low
    excl_high = "exclusiveMaximum" in schema and value >= high
    return (low + high) / 2 if excl_low or excl_high else min(max(value, low), high)


def _integer(schema: dict[str, Any], rng: random.Random, _depth: int) -> int:
    low, high = _bounds(schema, 0, 1000)
    ilow = int(low) + (1 if "exclusiveMinimum" in schema else 0)
    ihigh = int(high) - (1 if "exclusiveMaximum" in schema else 0)
    return rng.randint(ilow, max(ilow, ihigh))


def _array(schema: dict[str, Any], rng: random.Random, depth: int) -> list[Any]:
    low = int(schema.get("minItems", 0))
    high = int(schema.get("maxItems", max(low, 4)))
    items = schema.get("items", {"type": "string"})
    count = rng.randint(low, high) if depth < _MAX_DEPTH else low
    return [generate(items, rng, depth + 1) for _ in range(count)]


def _boolean(_schema: dict[str, Any], rng: random.Random, _depth: int) -> bool:
    return rng.random() < 0.5


def _null(_schema: dict[str, Any], _rng: random.Random, _depth: int) -> None:
    return None


_GENERATORS = {
    "object": _object,
    "string": _string,
    "number": _number,
    "integer": _integer,
    "array": _array,
    "boolean": _boolean,
    "null": _null,
}
