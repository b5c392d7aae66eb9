"""Helpers for gpu_stage tests: decode encoded rows with fastavro (the reference reader)."""

from __future__ import annotations

import copy
import io
from typing import Any

import fastavro

from gpu_stage.transform.batch import ParseResult
from llmpipe.record import TypedRecord


def _strip_logical(schema: Any) -> Any:
    """The same schema without logical types, so timestamps decode as plain epoch-ms ints."""
    if isinstance(schema, dict):
        return {k: _strip_logical(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical(v) for v in schema]
    return schema


def plain_schema(record: TypedRecord) -> Any:
    return fastavro.parse_schema(_strip_logical(copy.deepcopy(record.avro)))


def decode_all(result: ParseResult, record: TypedRecord) -> dict[int, dict[str, Any]]:
    """Batch position -> decoded typed row, reading every datum with fastavro."""
    schema = plain_schema(record)
    rows = {}
    for position, _key, value in result.encoded.items():
        stream = io.BytesIO(value)
        rows[position] = fastavro.schemaless_reader(stream, schema, None)
        assert stream.tell() == len(value), "datum has trailing bytes"
    return rows


def reencode(record: TypedRecord, row: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, plain_schema(record), row)
    return out.getvalue()
