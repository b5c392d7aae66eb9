"""Every shared vector through both CPU backends, checked against its hand-written expectation.

The GPU backend's tests run the same vectors (``tests.vectors``) and compare bytes with these.
"""

from __future__ import annotations

from typing import Any

import pytest
from gpu_stage_testlib import decode_all, reencode

from gpu_stage.transform.api import Backend
from gpu_stage.transform.contract.reference import ReferenceBackend
from gpu_stage.transform.native import NativeBackend
from llmpipe.record import TypedRecord
from tests.vectors import Vector, batch_of, load_vectors

VECTORS = load_vectors()
RECORD: TypedRecord = ReferenceBackend().settings.record


@pytest.fixture(scope="module", params=["reference", "cpu"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """The pure-Python reference and the native core, each held to the same expectations."""
    return ReferenceBackend() if request.param == "reference" else NativeBackend()


@pytest.fixture(scope="module")
def outcome(backend: Backend) -> tuple[dict[int, dict[str, Any]], dict[int, Any], Any]:
    batch = batch_of(VECTORS)
    result = backend.parse(batch)
    rows = decode_all(result, RECORD)
    offsets = list(batch.offsets)
    bad: dict[int, Any] = {}
    for record in result.bad:
        matches = [
            i
            for i, v in enumerate(VECTORS)
            if v.value == record.raw and v.key == record.key and offsets[i] == record.offset
        ]
        assert len(matches) >= 1
        for i in matches:
            bad.setdefault(i, record)
    return rows, bad, result


def test_vectors_are_there() -> None:
    names = {v.name for v in VECTORS}
    assert len(names) == len(VECTORS), "vector names must be unique"
    for required in (
        "nonstream_tool_calls",
        "fenced_json_content",
        "n_greater_than_one",
        "logprobs_present",
        "usage_only_chunk",
        "error_nested_500",
        "error_flat_404",
        "invalid_utf8",
        "generated_10mb",
        "generated_depth_1000_in_unknown_field",
        "duplicate_keys_last_wins",
        "unicode_escapes",
    ):
        assert required in names


def test_every_position_good_or_exactly_one_bad(outcome: Any) -> None:
    rows, _bad, result = outcome
    assert len(result.encoded) + len(result.bad) == len(VECTORS)
    assert set(result.encoded.rows.tolist()).isdisjoint({i for i, v in enumerate(VECTORS) if "bad" in v.expect})
    assert sorted(rows) == [i for i, v in enumerate(VECTORS) if "fields" in v.expect]


@pytest.mark.parametrize("index", range(len(VECTORS)), ids=[v.name for v in VECTORS])
def test_vector(index: int, outcome: Any) -> None:
    rows, bad, _result = outcome
    vector: Vector = VECTORS[index]
    if "bad" in vector.expect:
        record = bad[index]
        assert record.reason.value == vector.expect["bad"]
        assert record.error == vector.expect["error"]
        assert record.raw == vector.value
        assert record.key == vector.key
        assert (record.topic, record.partition, record.offset) == ("llm.raw", vector.partition, vector.offset)
        assert record.stage == "gpu_stage"
        return
    row = rows[index]
    for column, expected in vector.expect["fields"].items():
        assert row[column] == expected, column
    assert row["raw_partition"] == vector.partition
    assert row["raw_offset"] == vector.offset


def test_encoded_bytes_equal_fastavro_of_the_decoded_rows(outcome: Any) -> None:
    rows, _bad, result = outcome
    for position, _key, value in result.encoded.items():
        assert reencode(RECORD, rows[position]) == value


def test_keys_travel_with_rows(outcome: Any) -> None:
    _rows, _bad, result = outcome
    for position, key, _value in result.encoded.items():
        assert key == VECTORS[position].key


def test_same_input_same_bytes(backend: Backend) -> None:
    first = backend.parse(batch_of(VECTORS))
    second = ReferenceBackend().parse(batch_of(VECTORS))
    assert first.encoded.buf == second.encoded.buf
    assert first.encoded.offsets.tolist() == second.encoded.offsets.tolist()
    assert first.bad == second.bad


def test_one_vector_per_batch_gives_the_same_bytes(backend: Backend) -> None:
    together = backend.parse(batch_of(VECTORS))
    alone = [backend.parse(batch_of([v])) for v in VECTORS]
    joined = b"".join(r.encoded.buf for r in alone)
    assert joined == together.encoded.buf
