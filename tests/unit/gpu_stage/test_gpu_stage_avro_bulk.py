"""The bulk encoder must write exactly what fastavro writes, row for row."""

from __future__ import annotations

import io
from typing import Any, NamedTuple

import fastavro
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_stage.transform.avro.bulk import BulkEncoder
from llmpipe.errors import SerializationError
from llmpipe.record import TypedRecord

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

# Every Avro type the typed record can contain, nested the ways the type algebra allows.
ALL_TYPES_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "all_types",
    "fields": [
        {"name": "s", "type": ["null", "string"], "default": None},
        {"name": "i", "type": ["null", "int"], "default": None},
        {"name": "l", "type": ["null", "long"], "default": None},
        {
            "name": "ts",
            "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
            "default": None,
        },
        {"name": "d", "type": ["null", "double"], "default": None},
        {"name": "b", "type": ["null", "boolean"], "default": None},
        {"name": "m", "type": ["null", {"type": "map", "values": ["null", "string"]}], "default": None},
        {"name": "al", "type": ["null", {"type": "array", "items": ["null", "long"]}], "default": None},
        {"name": "ad", "type": ["null", {"type": "array", "items": ["null", "double"]}], "default": None},
        {
            "name": "ar",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": [
                        "null",
                        {
                            "type": "record",
                            "name": "all_types_ar",
                            "fields": [
                                {"name": "x", "type": ["null", "int"], "default": None},
                                {"name": "y", "type": ["null", "string"], "default": None},
                                {
                                    "name": "z",
                                    "type": ["null", {"type": "array", "items": ["null", "boolean"]}],
                                    "default": None,
                                },
                            ],
                        },
                    ],
                },
            ],
            "default": None,
        },
        {
            "name": "r",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "all_types_r",
                    "fields": [{"name": "q", "type": ["null", "string"], "default": None}],
                },
            ],
            "default": None,
        },
    ],
}

TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
    max_size=12,
) | st.sampled_from(["", "😀𝄞", "中文", "\x00", "é" * 70])


def strategy_for(schema: Any) -> st.SearchStrategy[Any]:
    """Values of an Avro type (nullable unions may give None)."""
    if isinstance(schema, list):
        return st.none() | strategy_for(schema[1])
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "record":
            return st.fixed_dictionaries({}, optional={f["name"]: strategy_for(f["type"]) for f in schema["fields"]})
        if kind == "array":
            return st.lists(strategy_for(schema["items"]), max_size=4)
        if kind == "map":
            return st.dictionaries(TEXT, strategy_for(schema["values"]), max_size=4)
        return strategy_for(kind)
    scalars: dict[str, st.SearchStrategy[Any]] = {
        "string": TEXT,
        "int": st.integers(*INT32) | st.sampled_from([0, -1, 63, 64, -64, -65, *INT32]),
        "long": st.integers(*INT64) | st.sampled_from([0, -1, 2**53 + 1, *INT64]),
        "double": st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, float("inf"), 5e-324]),
        "boolean": st.booleans(),
    }
    return scalars[schema]


def fastavro_bytes(parsed: Any, row: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, row)
    return out.getvalue()


def assert_identical(schema: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    parsed = fastavro.parse_schema(schema)
    buf, offsets = BulkEncoder(schema).encode_rows(rows)
    assert len(offsets) == len(rows) + 1
    expected = [fastavro_bytes(parsed, row) for row in rows]
    assert buf == b"".join(expected)
    got = [buf[offsets[i] : offsets[i + 1]] for i in range(len(rows))]
    assert got == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(strategy_for(ALL_TYPES_SCHEMA), max_size=6))
def test_every_type_matches_fastavro(rows: list[dict[str, Any]]) -> None:
    assert_identical(ALL_TYPES_SCHEMA, rows)


TYPED = TypedRecord.from_file()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(strategy_for(TYPED.avro), max_size=5))
def test_typed_record_matches_fastavro(rows: list[dict[str, Any]]) -> None:
    assert_identical(TYPED.avro, rows)


LONG_ONLY = {"type": "record", "name": "r", "fields": [{"name": "l", "type": "long"}]}


class _Encoded(NamedTuple):
    buf: bytes
    offsets: Any


def _long_column(values: list[int]) -> _Encoded:
    """Each value as a one-field record of a bare ``long``: its datum is exactly the value's varint."""
    return _Encoded(*BulkEncoder(LONG_ONLY).encode_rows([{"l": v} for v in values]))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(*INT64), max_size=20))
def test_varints_match_the_avro_spec(values: list[int]) -> None:
    part = _long_column(values)
    expected = []
    for v in values:
        zz = (v << 1) ^ (v >> 63)
        out = bytearray()
        while True:
            byte = zz & 0x7F
            zz >>= 7
            out.append(byte | (0x80 if zz else 0))
            if not zz:
                break
        expected.append(bytes(out))
    assert part.buf == b"".join(expected)
    assert np.diff(part.offsets).tolist() == [len(e) for e in expected]


def test_known_bytes_by_hand() -> None:
    # Avro spec examples: long 0 -> 00, -1 -> 01, 1 -> 02, -64 -> 7f, 64 -> 80 01.
    part = _long_column([0, -1, 1, -64, 64])
    assert part.buf == bytes([0x00, 0x01, 0x02, 0x7F, 0x80, 0x01])
    schema = ALL_TYPES_SCHEMA
    buf, offsets = BulkEncoder(schema).encode_rows([{"s": "é", "al": [], "m": {"k": None}}])
    # s: branch 1 (02), len 2 (04), c3 a9; i,l,ts,d,b: null (00 x5); m: count 1 (02), key "k"
    # (02 6b), value null (00), terminator 00; al: branch 1, empty block (00); ad, ar, r: null.
    assert buf == bytes.fromhex("0204c3a9" + "00" * 5 + "0202026b0000" + "0200" + "000000")
    assert offsets.tolist() == [0, len(buf)]


def test_empty_batch() -> None:
    buf, offsets = BulkEncoder(TYPED.avro).encode_columns({}, 0)
    assert buf == b""
    assert offsets.tolist() == [0]


def test_absent_columns_are_null() -> None:
    buf, offsets = BulkEncoder(ALL_TYPES_SCHEMA).encode_columns({"b": [True, None]}, 2)
    row0 = "00" * 5 + "0201" + "00" * 5
    row1 = "00" * 11
    assert buf == bytes.fromhex(row0 + row1)
    assert offsets.tolist() == [0, 12, 23]


@pytest.mark.parametrize(
    ("row", "what"),
    [
        ({"i": 2**31}, "int out of range"),
        ({"l": 2**63}, "long out of range"),
        ({"s": "\ud800"}, "lone surrogate"),
        ({"s": 5}, "not a string"),
    ],
)
def test_unencodable_values_raise_serialization_error(row: dict[str, Any], what: str) -> None:
    with pytest.raises(SerializationError):
        BulkEncoder(ALL_TYPES_SCHEMA).encode_rows([row])
