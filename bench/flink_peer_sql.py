"""Flink SQL expressions that do gpu_stage's extraction per row: the peer a Flink user would write.

Everything is generated: body paths from the typed record's columns, content checks from the content
JSON Schema (the same file that drives gpu_stage's validator), so the peer follows schema changes the
way the product does. The rules mirror ``gpu_stage/transform/contract/semantics.md`` as far as Flink's JSON functions
allow; :data:`NOT_PRODUCED` and :data:`DIVERGENCES` list where they do not.

Each content property is read once as ``JSON_QUERY(candidate, '$.p' WITH WRAPPER)``: the compact JSON
text of ``[value]`` tells the value's JSON type (``["`` string, ``[true]`` boolean, ``[-1`` number,
``[[`` array), which ``JSON_VALUE`` alone cannot (it returns ``"0.5"`` and ``0.5`` alike).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.typed_table import quote
from llmpipe.errors import ConfigError
from llmpipe.record import TypedRecord

NOT_PRODUCED = {
    "attributes": "a JSON object header → MAP needs a JSON-to-map function Flink SQL lacks",
    "metadata": "an object of unknown keys → MAP: same",
    "extra": "unknown top-level keys cannot be listed with JSON paths",
}
"""Typed columns the peer writes as NULL."""

DIVERGENCES = (
    "choices: only bodies with exactly one choice (NULL otherwise); Flink SQL cannot map an array of "
    "objects to an array of rows without a UDF",
    "created: integer seconds only (float and ISO-8601 forms give NULL, and the record is dropped)",
    "tool_arguments: re-serialized by JSON_QUERY, which does not keep key order (orjson does)",
    "content: additionalProperties is not checked (keys cannot be listed); an explicit null value "
    "counts as absent (JSON_QUERY/JSON_EXISTS do not tell them apart); integers written as 3.0 are "
    "rejected",
    "invalid bodies are dropped, not dead-lettered (Flink SQL has no side output)",
    "IS JSON accepts a JSON value followed by other text; orjson (gpu_stage) calls that invalid_json",
)

WS = "[ \\t\\n\\r]"

_TYPE_PATTERN = {
    "string": '^\\["',
    "number": "^\\[-?[0-9]",
    "integer": "^\\[-?[0-9]+\\]$",
    "boolean": "^\\[(true|false)\\]$",
}
_ITEM_PATTERN = {
    "string": '"([^"\\\\]|\\\\.)*"',
    "number": "-?[0-9][0-9.eE+-]*",
    "integer": "-?[0-9]+",
    "boolean": "(true|false)",
}
_CAST = {"string": "{v}", "number": "CAST({v} AS DOUBLE)", "integer": "CAST({v} AS BIGINT)",
         "boolean": "CAST({v} AS BOOLEAN)"}


def keep(expr: str) -> str:
    """``expr``, marked so that the SELECT computing it stays a stage of its own.

    Flink merges stacked projections and inlines a column's expression at every use; it refuses only
    when the inlined expression is non-deterministic. Without this the content checks inline the
    content extraction (three full-body ``JSON_VALUE`` parses) dozens of times per record and
    planning takes minutes. ``RAND() >= 0`` is always true and costs one random number per record.
    """
    return f"CASE WHEN RAND() >= 0 THEN {expr} END"


def jv(doc: str, path: str) -> str:
    """``JSON_VALUE`` as a string (``RETURNING DOUBLE/BIGINT`` fail on some inputs in Flink 2.2)."""
    return f"JSON_VALUE({doc}, {quote(path)})"


def first_of(doc: str, *paths: str) -> str:
    """The first non-null of several paths."""
    return "COALESCE(" + ", ".join(jv(doc, p) for p in paths) + ")"


FENCE_START = "^" + WS + "*```"
FENCE_BODY = "(?s)^" + WS + "*```[^\\n]*\\n(.*)$"
FENCE_END = "```" + WS + "*$"
JSON_START = "^" + WS + "*[{\\[]"
"""Every pattern is anchored at the start or begins with a backtick: a trailing-whitespace pattern
such as ``[ \\t\\n\\r]+$`` is quadratic on the long space padding that LLM output often has."""


def fence_columns(text: str) -> list[str]:
    """``fenced`` and ``fence_body`` (the text after the fence's first line) of a content column."""
    return [f"REGEXP({text}, {quote(FENCE_START)}) AS fenced",
            f"REGEXP_EXTRACT({text}, {quote(FENCE_BODY)}, 1) AS fence_body"]


def inner_text(text: str) -> str:
    """The text inside a fence (closing fence removed), else the text itself; JSON parsers skip whitespace."""
    return (f"CASE WHEN fenced THEN COALESCE(REGEXP_REPLACE(fence_body, {quote(FENCE_END)}, ''), '') "
            f"ELSE {text} END")


def candidate(inner: str) -> str:
    """gpu_stage's ``json_candidate``: the inner text when it starts with ``{`` or ``[`` (after whitespace)."""
    return f"CASE WHEN REGEXP({inner}, {quote(JSON_START)}) THEN {inner} END"


def wrapped(name: str) -> str:
    """Column name holding ``[value]`` of content property ``name``."""
    return f"w_{name}"


def wrapper_columns(schema: Mapping[str, Any]) -> list[str]:
    """``JSON_QUERY(... WITH WRAPPER) AS w_<p>`` for every content property."""
    columns = []
    for name in _properties(schema):
        query = f"JSON_QUERY(cand, {quote('$.' + name)} WITH WRAPPER)"
        columns.append(f"{keep(query)} AS `{wrapped(name)}`")
    return columns


def _properties(schema: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    props = schema.get("properties")
    if not isinstance(props, dict):
        msg = "content schema must have properties"
        raise ConfigError(msg)
    return props


def _checks(name: str, prop: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(condition, error code) for one present property, in the validator's order."""
    w = f"`{wrapped(name)}`"
    kind = prop.get("type")
    if kind == "array":
        item = prop.get("items", {}).get("type")
        if item not in _ITEM_PATTERN:
            msg = f"content property {name!r}: unsupported items {item!r}"
            raise ConfigError(msg)
        pat = _ITEM_PATTERN[item]
        items = f"^\\[\\[({pat}(,{pat})*)?\\]\\]$"
        return [(f"NOT REGEXP({w}, '^\\[\\[')", f"type:{name}"),
                (f"NOT REGEXP({w}, {quote(items)})", f"items:{name}")]
    if kind not in _TYPE_PATTERN:
        msg = f"content property {name!r}: unsupported type {kind!r}"
        raise ConfigError(msg)
    checks = [(f"NOT REGEXP({w}, {quote(_TYPE_PATTERN[kind])})", f"type:{name}")]
    value = _CAST[kind].format(v=jv(w, "$[0]"))
    if isinstance(prop.get("enum"), list):
        allowed = ", ".join(quote(str(v)) for v in prop["enum"])
        checks.append((f"{jv(w, '$[0]')} NOT IN ({allowed})", f"enum:{name}"))
    if prop.get("minimum") is not None:
        checks.append((f"{value} < {prop['minimum']}", f"minimum:{name}"))
    if prop.get("maximum") is not None:
        checks.append((f"{value} > {prop['maximum']}", f"maximum:{name}"))
    return checks


def content_error(schema: Mapping[str, Any]) -> str:
    """``content_error`` over ``cand`` and the wrapper columns; NULL for prose or valid content."""
    whens = ["WHEN cand IS NULL THEN CAST(NULL AS STRING)",
             "WHEN NOT cand IS JSON THEN 'invalid_json'",
             "WHEN NOT cand IS JSON OBJECT THEN 'not_an_object'"]
    whens += [f"WHEN `{wrapped(r)}` IS NULL THEN 'missing:{r}'" for r in schema.get("required", ())]
    for name, prop in _properties(schema).items():
        whens += [f"WHEN `{wrapped(name)}` IS NOT NULL AND {cond} THEN '{code}'"
                  for cond, code in _checks(name, prop)]
    return "CASE " + " ".join(whens) + " END"


def content_row(record: TypedRecord) -> str:
    """The typed ``content`` ROW built from the wrapper columns (caller nulls it when not valid)."""
    values = []
    ddl = {f.name: f.type.ddl() for f in record.content.fields}
    for name, prop in _properties(record.content_schema).items():
        w = f"`{wrapped(name)}`"
        if prop.get("type") == "array":
            arr = f"JSON_QUERY({w}, '$[0]' RETURNING ARRAY<STRING>)"
            values.append(arr if prop["items"]["type"] == "string" else f"CAST({arr} AS {ddl[name]})")
        else:
            values.append(_CAST[prop["type"]].format(v=jv(w, "$[0]")))
    return f"CAST(ROW({', '.join(values)}) AS {record.content.ddl()})"
