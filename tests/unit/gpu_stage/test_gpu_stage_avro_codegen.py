"""The generated row encoder writes exactly what fastavro writes, and the CPU backend's bytes are unchanged."""

from __future__ import annotations

import hashlib
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_stage.synth import SynthConfig, batch, bodies
from gpu_stage.transform.avro.bulk import BulkEncoder
from gpu_stage.transform.avro.codegen import compile_rows_encoder, long_bytes
from gpu_stage.transform.contract.reference import ReferenceBackend
from llmpipe.errors import SerializationError
from tests.unit.gpu_stage.test_gpu_stage_avro_bulk import (
    ALL_TYPES_SCHEMA,
    INT64,
    TYPED,
    fastavro_bytes,
    strategy_for,
)

SYNTH_SHA256 = "cc0235131d0e79c01d3a2c98508ce9dec925ad2fd2d85ef2edd23e439f220e58"
"""sha256 of the CPU backend's encoded buffers for 50 000 synth bodies (default seed, batches of
10 000), recorded with the columnar encoder before the generated one replaced it."""


def assert_tuples_identical(schema: dict[str, Any], rows: list[dict[str, Any]], layout: list[str]) -> None:
    parsed = fastavro.parse_schema(schema)
    tuples = [tuple(r.get(name) for name in layout) for r in rows]
    buf, offsets = BulkEncoder(schema).encode_tuples(tuples, layout)
    kept = [{name: r.get(name) for name in layout} for r in rows]
    expected = [fastavro_bytes(parsed, row) for row in kept]
    assert buf == b"".join(expected)
    assert [buf[offsets[i] : offsets[i + 1]] for i in range(len(rows))] == expected


def layouts(schema: dict[str, Any]) -> st.SearchStrategy[list[str]]:
    names = [f["name"] for f in schema["fields"]]
    return st.permutations(names).flatmap(lambda p: st.integers(0, len(p)).map(lambda k: list(p[:k])))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(strategy_for(TYPED.avro), max_size=5), layouts(TYPED.avro))
def test_typed_record_tuples_match_fastavro(rows: list[dict[str, Any]], layout: list[str]) -> None:
    assert_tuples_identical(TYPED.avro, rows, layout)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(strategy_for(ALL_TYPES_SCHEMA), max_size=5), layouts(ALL_TYPES_SCHEMA))
def test_every_type_tuples_match_fastavro(rows: list[dict[str, Any]], layout: list[str]) -> None:
    assert_tuples_identical(ALL_TYPES_SCHEMA, rows, layout)


@settings(max_examples=300, deadline=None)
@given(st.integers(*INT64) | st.integers(-(2**20), 2**20) | st.integers(1_700_000_000_000, 1_800_000_000_000))
def test_long_slow_path_matches_fastavro(value: int) -> None:
    assert long_bytes(value, *INT64) == fastavro_bytes(fastavro.parse_schema("long"), value)


def test_large_strings_and_counts_use_the_slow_length_path() -> None:
    schema: dict[str, Any] = {
        "type": "record",
        "name": "big",
        "fields": [
            {"name": "s", "type": ["null", "string"]},
            {"name": "a", "type": ["null", {"type": "array", "items": "long"}]},
        ],
    }
    rows = [{"s": "é" * 20_000, "a": list(range(-9000, 9000))}]
    assert_tuples_identical(schema, rows, ["s", "a"])


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 1.5, "7"])
def test_bad_longs_raise_serialization_error(value: Any) -> None:
    encode = compile_rows_encoder(ALL_TYPES_SCHEMA, ["l"])
    with pytest.raises(SerializationError):
        encode([(value,)])


def test_unknown_layout_field_is_rejected() -> None:
    with pytest.raises(SerializationError):
        compile_rows_encoder(ALL_TYPES_SCHEMA, ["nope"])


def test_cpu_backend_output_is_unchanged_for_the_synth_seed() -> None:
    values = bodies(50_000, SynthConfig())
    backend = ReferenceBackend()
    digest = hashlib.sha256()
    for start in range(0, len(values), 10_000):
        digest.update(backend.parse(batch(values[start : start + 10_000], first_offset=start)).encoded.buf)
    assert digest.hexdigest() == SYNTH_SHA256
