"""Batch-level behaviour of both CPU backends: empty and all-bad batches, ragged input, the size limit."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from gpu_stage.transform.api import Backend, TransformSettings
from gpu_stage.transform.batch import RawBatch
from gpu_stage.transform.contract.reference import ReferenceBackend
from gpu_stage.transform.native import NativeBackend
from llmpipe.dlq import Reason
from llmpipe.record import TypedRecord

GOOD = b'{"id":"a","object":"chat.completion","created":1,"choices":[]}'


MakeBackend = type[ReferenceBackend] | type[NativeBackend]
BACKENDS: dict[str, MakeBackend] = {"reference": ReferenceBackend, "cpu": NativeBackend}


@pytest.fixture(params=sorted(BACKENDS))
def make(request: pytest.FixtureRequest) -> MakeBackend:
    """Each CPU backend's class, so every test below runs against both."""
    return BACKENDS[request.param]


def test_backends_satisfy_the_protocol() -> None:
    for name, cls in BACKENDS.items():
        backend = cls()
        assert isinstance(backend, Backend)
        assert backend.name == name


def test_empty_batch(make: MakeBackend) -> None:
    result = make().parse(RawBatch.of_values([]))
    assert len(result) == 0
    assert result.encoded.buf == b""
    assert result.encoded.offsets.tolist() == [0]
    assert result.encoded.rows.tolist() == []
    assert result.bad == []


def test_all_bad_batch(make: MakeBackend) -> None:
    values = [b"", b"[]", b"\xff", b'{"error":{"code":500}}']
    result = make().parse(RawBatch.of_values(values, partition=2, first_offset=10))
    assert len(result.encoded) == 0
    assert result.encoded.buf == b""
    assert [b.reason for b in result.bad] == [
        Reason.INVALID_JSON,
        Reason.NOT_AN_OBJECT,
        Reason.INVALID_UTF8,
        Reason.UPSTREAM_ERROR,
    ]
    assert [(b.partition, b.offset, b.raw) for b in result.bad] == [(2, 10 + i, v) for i, v in enumerate(values)]


def test_good_rows_keep_batch_positions_and_offsets_are_contiguous(make: MakeBackend) -> None:
    values = [b"x", GOOD, b"y", GOOD, GOOD]
    batch = RawBatch(
        values=values,
        keys=[b"k0", b"k1", None, b"k3", b"k4"],
        headers=[[] for _ in values],
        topic="t",
        partitions=np.zeros(5, dtype=np.int64),
        offsets=np.arange(5, dtype=np.int64),
        timestamps_ms=np.full(5, 7, dtype=np.int64),
    )
    encoded = make().parse(batch).encoded
    assert encoded.rows.tolist() == [1, 3, 4]
    assert encoded.keys == [b"k1", b"k3", b"k4"]
    assert encoded.offsets[0] == 0
    assert encoded.offsets[-1] == len(encoded.buf)
    assert all(len(encoded.value(i)) > 0 for i in range(3))
    # Rows 3 and 4 differ only in key and offset, so their datums differ.
    assert encoded.value(1) != encoded.value(2)


def test_size_limit_is_inclusive(make: MakeBackend) -> None:
    settings = TransformSettings(record=TypedRecord.from_file(), max_record_bytes=len(GOOD))
    result = make(settings).parse(RawBatch.of_values([GOOD, GOOD + b" "]))
    assert result.encoded.rows.tolist() == [0]
    assert [b.reason for b in result.bad] == [Reason.TOO_LARGE]


def test_ragged_batch_is_rejected() -> None:
    with pytest.raises(ValueError, match="keys"):
        RawBatch(values=[GOOD], keys=[], headers=[[]], topic="t", partitions=[0], offsets=[0], timestamps_ms=[0])


def test_synthetic_bodies_are_deterministic_and_all_accounted_for(make: MakeBackend) -> None:
    from gpu_stage.synth import batch, bodies

    values = bodies(300)
    assert values == bodies(300)
    result = make().parse(batch(values))
    assert len(result) == 300
    error_bodies = sum(1 for v in values if v.startswith(b'{"error":'))
    assert [b.reason for b in result.bad] == [Reason.UPSTREAM_ERROR] * error_bodies


def test_chunks_cover_the_batch_in_order_with_near_equal_sizes() -> None:
    batch = RawBatch.of_values([b"x"] * 25, first_offset=100)
    assert batch.chunks(10) == [(0, 8), (8, 16), (16, 25)]
    assert batch.chunks(0) == [(0, 25)]
    assert batch.chunks(25) == [(0, 25)]
    assert RawBatch.of_values([]).chunks(10) == [(0, 0)]
    for size in (1, 3, 7, 24):
        chunks = batch.chunks(size)
        assert chunks[0][0] == 0 and chunks[-1][1] == 25
        assert all(end == nxt for (_, end), (nxt, _) in pairwise(chunks))
        assert all(0 < end - start <= size for start, end in chunks)


def test_slice_keeps_every_column_of_the_records_it_takes() -> None:
    batch = RawBatch(
        values=[b"a", b"b", b"c", b"d"],
        keys=[b"k0", None, b"k2", b"k3"],
        headers=[[("h", b"0")], [], [("h", b"2")], []],
        topic="t",
        partitions=np.array([0, 1, 0, 1], dtype=np.int64),
        offsets=np.array([5, 6, 7, 8], dtype=np.int64),
        timestamps_ms=[10, 11, 12, 13],
    )
    part = batch.slice(1, 3)
    assert list(part.values) == [b"b", b"c"]
    assert list(part.keys) == [None, b"k2"]
    assert list(part.headers) == [[], [("h", b"2")]]
    assert part.partitions.tolist() == [1, 0]  # type: ignore[union-attr]
    assert part.offsets.tolist() == [6, 7]  # type: ignore[union-attr]
    assert list(part.timestamps_ms) == [11, 12]
    assert part.topic == "t"
    assert batch.slice(0, 4) is batch
