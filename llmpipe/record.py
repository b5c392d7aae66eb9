"""The typed record of ``llm.typed``: one definition for the Avro schema, the Flink DDL and the parsers.

The content part (``content`` ROW) comes from the user's JSON Schema file (design §4): the same file is
sent to vLLM as ``response_format`` and defines these columns, so the three can never drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

from llmpipe.content_schema import DEFAULT_CONTENT_SCHEMA as DEFAULT_CONTENT_SCHEMA  # re-exported
from llmpipe.content_schema import load_content_schema
from llmpipe.errors import ConfigError
from llmpipe.types import (
    BIGINT,
    BOOLEAN,
    DOUBLE,
    INT,
    STRING,
    TIMESTAMP3,
    Array,
    Field,
    Row,
    SqlType,
    StringMap,
    avro_schema,
    ddl_columns,
)

CHOICE = Row(
    (
        Field("index", INT),
        Field("finish_reason", STRING),
        Field("content", STRING),
    )
)

_JSON_SCALARS: dict[str, SqlType] = {
    "string": STRING,
    "number": DOUBLE,
    "integer": BIGINT,
    "boolean": BOOLEAN,
}


def _before_content() -> tuple[Field, ...]:
    return (
        Field("request_id", STRING, "Kafka key of the raw record (the request's id)."),
        Field("completion_id", STRING, "`id` of the body (chatcmpl-…, cmpl-…)."),
        Field("object", STRING, "chat.completion, chat.completion.chunk or text_completion."),
        Field("created", TIMESTAMP3, "`created` as epoch milliseconds (event time)."),
        Field("model", STRING),
        Field("finish_reason", STRING, "First choice's finish_reason, kept as sent."),
        Field("stop_reason", STRING, "First choice's stop_reason (int or string) as a string."),
        Field("content_text", STRING, "First choice's message.content, delta.content or text."),
        Field("reasoning", STRING, "First choice's reasoning_content or reasoning."),
        Field("tool_name", STRING, "First tool call's function name."),
        Field("tool_arguments", STRING, "First tool call's arguments, compact JSON when valid."),
        Field("tool_arguments_valid", BOOLEAN, "Whether the arguments string is a JSON object."),
        Field("num_choices", INT),
        Field("choices", Array(CHOICE), "Every choice as (index, finish_reason, content)."),
        Field("prompt_tokens", BIGINT),
        Field("completion_tokens", BIGINT),
        Field("total_tokens", BIGINT),
        Field("cached_tokens", BIGINT, "usage.prompt_tokens_details.cached_tokens."),
        Field("latency_ms", BIGINT, "HTTP latency the connector measured (raw header)."),
        Field("attributes", StringMap(), "Request attributes carried from the request (raw header)."),
        Field("system_fingerprint", STRING),
        Field("service_tier", STRING),
        Field("metadata", StringMap(), "The body's `metadata` object; non-strings as JSON text."),
        Field("extra", StringMap(), "Unknown top-level fields as JSON text, so new fields flow through."),
    )


def _after_content() -> tuple[Field, ...]:
    return (
        Field("content_valid", BOOLEAN, "null: prose; true: JSON valid for the schema; false: not."),
        Field("content_error", STRING, "Why content_valid is false."),
        Field("raw_partition", INT, "Partition of the raw record."),
        Field("raw_offset", BIGINT, "Offset of the raw record."),
        Field("ingest_ts", TIMESTAMP3, "Kafka timestamp of the raw record (never the wall clock)."),
    )


def content_row(json_schema: dict[str, Any]) -> Row:
    """Map a JSON Schema object's properties to a ROW (scalars, arrays of scalars)."""
    if json_schema.get("type") != "object" or not isinstance(json_schema.get("properties"), dict):
        msg = "content schema must be an object with properties"
        raise ConfigError(msg)
    fields = [Field(name, _sql_type(name, prop)) for name, prop in json_schema["properties"].items()]
    return Row(tuple(fields))


def _sql_type(name: str, prop: dict[str, Any]) -> SqlType:
    kind = prop.get("type")
    if kind == "array":
        item = prop.get("items", {}).get("type")
        if item in _JSON_SCALARS:
            return Array(_JSON_SCALARS[item])
    elif isinstance(kind, str) and kind in _JSON_SCALARS:
        return _JSON_SCALARS[kind]
    msg = f"content schema property {name!r}: type {kind!r} is not supported (scalars, arrays of scalars)"
    raise ConfigError(msg)


@dataclass(frozen=True)
class TypedRecord:
    """The typed record definition for one content schema."""

    content_schema: dict[str, Any]

    @classmethod
    def from_file(cls, path: Path | str | None = None, option: str = "--content-schema") -> TypedRecord:
        """Load the content JSON Schema (the bundled default when ``path`` is None).

        Through :func:`~llmpipe.content_schema.load_content_schema`, so every command refuses the
        same schemas with the same words; ``option`` is the flag named in them.
        """
        return cls(load_content_schema(path, option))

    @cached_property
    def content(self) -> Row:
        """The ``content`` ROW made from the JSON Schema."""
        return content_row(self.content_schema)

    @cached_property
    def row(self) -> Row:
        """All columns in DDL (and Avro field) order."""
        return Row((*_before_content(), Field("content", self.content), *_after_content()))

    @cached_property
    def avro(self) -> dict[str, Any]:
        """Avro schema exactly as Flink's ``avro`` format derives it from the DDL."""
        return avro_schema(self.row)

    @cached_property
    def parsed_avro(self) -> Any:
        """Fastavro's parsed form of :attr:`avro`."""
        return parse_schema(self.avro)

    @cached_property
    def fingerprint(self) -> str:
        """CRC-64-AVRO fingerprint (hex) of the schema's canonical form, sent in a header."""
        canonical = to_parsing_canonical_form(self.parsed_avro)
        return str(fingerprint(canonical, "CRC-64-AVRO"))

    def ddl_columns(self) -> list[str]:
        """Flink column definitions in order."""
        return ddl_columns(self.row)

    def versioned_topic(self, base: str) -> str:
        """Typed topic for this schema: a changed schema never mixes with old records in one topic."""
        return f"{base}.{self.fingerprint[:8]}"

    def field_names(self) -> list[str]:
        """Top-level column names in order."""
        return [f.name for f in self.row.fields]


FINGERPRINT_HEADER = "llm.schema.fingerprint"
