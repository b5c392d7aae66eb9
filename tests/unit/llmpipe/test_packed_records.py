"""PackedRecords, the collect buffer of a packed reader, against the same records as objects; PackedBatch
slices against slices of the batch they were packed from."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_stage.transform.batch import RawBatch
from gpu_stage.transform.packed import PackedBatch
from llmpipe.kafka_io import PackedColumns, PackedRecords

TOPIC = "llm.raw"


def _raw(first: int, n: int, partitions: int = 3) -> RawBatch:
    return RawBatch(
        values=[("é" * (i % 4)).encode() + f'{{"i":{i}}}'.encode() for i in range(first, first + n)],
        keys=[None if i % 5 == 0 else f"k{i}".encode() for i in range(first, first + n)],
        headers=[[("latency.ms", str(i).encode()), ("model", None)][: i % 3] for i in range(first, first + n)],
        topic=TOPIC,
        partitions=[i % partitions for i in range(first, first + n)],
        offsets=[100 + i for i in range(first, first + n)],
        timestamps_ms=[1_700_000_000_000 + i for i in range(first, first + n)],
    )


def _records(*batches: RawBatch) -> PackedRecords:
    out = PackedRecords(TOPIC)
    for batch in batches:
        packed = PackedBatch.of(batch)
        columns = PackedColumns(*packed.columns())  # type: ignore[arg-type]
        out.extend(PackedRecords(TOPIC, [columns]))
    return out


def _as_raw(records: PackedRecords) -> RawBatch:
    return PackedBatch(TOPIC, *records.columns().columns()).to_raw()  # type: ignore[arg-type]


def _same(a: RawBatch, b: RawBatch) -> None:
    assert list(a.values) == list(b.values)
    assert list(a.keys) == list(b.keys)
    assert [list(h) for h in a.headers] == [list(h) for h in b.headers]
    for column in ("partitions", "offsets", "timestamps_ms"):
        assert list(map(int, getattr(a, column))) == list(map(int, getattr(b, column)))


def test_joined_calls_read_as_the_records_in_order() -> None:
    first, second = _raw(0, 7), _raw(7, 11)
    records = _records(first, second, _raw(18, 0))
    assert len(records) == 18
    assert records.nbytes == sum(map(len, first.values)) + sum(map(len, second.values))
    _same(_as_raw(records), _raw(0, 18))


def test_an_empty_buffer_has_no_records_and_no_offsets() -> None:
    empty = PackedRecords(TOPIC)
    assert len(empty) == 0 and empty.nbytes == 0
    assert len(empty.columns()) == 0
    assert empty.partitions_seen() == set() and empty.next_offsets() == {}


def test_partitions_seen_and_the_offsets_after_each() -> None:
    records = _records(_raw(0, 5), _raw(5, 5))
    assert records.partitions_seen() == {(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)}
    # records 0..9 at offsets 100..109, record i in partition i % 3: the last of each is 9, 7, 8
    assert records.next_offsets() == {(TOPIC, 0): 110, (TOPIC, 1): 108, (TOPIC, 2): 109}


@pytest.mark.parametrize("dropped", [{(TOPIC, 1)}, {(TOPIC, 0), (TOPIC, 2)}, {("other", 1)}, set()])
def test_without_drops_exactly_the_records_of_those_partitions(dropped: set[tuple[str, int]]) -> None:
    whole = _raw(0, 12)
    kept = _records(_raw(0, 6), _raw(6, 6)).without(dropped)
    gone = {p for t, p in dropped if t == TOPIC}
    rows = [i for i in range(12) if whole.partitions[i] not in gone]
    assert len(kept) == len(rows)
    assert kept.nbytes == sum(len(whole.values[i]) for i in rows)
    if rows:
        _same(_as_raw(kept), RawBatch(
            values=[whole.values[i] for i in rows], keys=[whole.keys[i] for i in rows],
            headers=[whole.headers[i] for i in rows], topic=TOPIC,
            partitions=[whole.partitions[i] for i in rows], offsets=[whole.offsets[i] for i in rows],
            timestamps_ms=[whole.timestamps_ms[i] for i in rows],
        ))  # fmt: skip


@pytest.mark.parametrize(("start", "end"), [(0, 13), (0, 4), (4, 9), (12, 13), (5, 5)])
def test_a_packed_slice_holds_the_same_records_as_a_slice_of_the_batch(start: int, end: int) -> None:
    batch = _raw(0, 13)
    piece = PackedBatch.of(batch).slice(start, end)
    assert len(piece) == end - start
    _same(piece.to_raw(), batch.slice(start, end))
    assert (int(piece.value_ends[-1]) if len(piece) else 0) == sum(map(len, batch.values[start:end]))


def test_packed_chunks_are_the_batchs_chunks() -> None:
    batch = _raw(0, 25)
    assert PackedBatch.of(batch).chunks(10) == batch.chunks(10) == [(0, 8), (8, 16), (16, 25)]
    assert np.array_equal(PackedBatch.of(batch).slice(8, 16).offsets, np.arange(108, 116))


def _padded(records: PackedRecords) -> PackedRecords:
    """The same records, each buffer of each part longer than its last end (as a reused buffer is)."""
    def pad(buf: np.ndarray) -> np.ndarray:
        return np.concatenate([buf, np.frombuffer(b"\xee" * 5, dtype=np.uint8)])

    parts = [PackedColumns(pad(c.value_buf), c.value_ends, pad(c.key_buf), c.key_ends, c.key_null,
                           pad(c.header_buf), c.header_ends, c.partitions, c.offsets, c.timestamps_ms)
             for c in records.parts]  # fmt: skip
    return PackedRecords(TOPIC, parts)


def _inside(column: np.ndarray, buffer: np.ndarray) -> bool:
    start = column.__array_interface__["data"][0] - buffer.__array_interface__["data"][0]
    return start >= 0 and start + column.nbytes <= buffer.nbytes


@pytest.mark.parametrize("with_buffer", [False, True])
def test_a_batch_joined_from_consume_calls_holds_the_records_in_order(with_buffer: bool) -> None:
    from gpu_stage.worker import to_batch

    given: list[np.ndarray] = []

    def allocate(size: int) -> np.ndarray:
        given.append(np.full(size + 3, 0xAA, dtype=np.uint8))
        return given[-1]

    records = _padded(_records(_raw(0, 7), _raw(7, 0), _raw(7, 11), _raw(18, 1)))
    batch = to_batch(records, allocate if with_buffer else None)
    assert isinstance(batch, PackedBatch) and len(batch) == 19
    _same(batch.to_raw(), _raw(0, 19))
    assert batch.value_bytes == sum(map(len, _raw(0, 19).values))
    if with_buffer:  # every column written once, into the one buffer given
        assert len(given) == 1
        assert all(_inside(column, given[0]) for column in batch.columns())
        assert len(batch.value_buf) == batch.value_bytes + 1  # the byte a device lane may read past the values


def test_a_joined_batch_is_laid_out_as_a_packed_one() -> None:
    """Columns at the same places as ``PackedBatch.of`` puts them, so the device lane's views carry over."""
    def starts(batch: PackedBatch, buffer: np.ndarray) -> list[int]:
        base = buffer.__array_interface__["data"][0]
        return [c.__array_interface__["data"][0] - base for c in batch.columns()]

    buffers: list[np.ndarray] = []

    def allocate(size: int) -> np.ndarray:
        buffers.append(np.zeros(size, dtype=np.uint8))
        return buffers[-1]

    whole = _raw(0, 12)
    joined = PackedBatch.joined(TOPIC, [p.columns() for p in _records(_raw(0, 5), _raw(5, 7)).parts], allocate)
    packed = PackedBatch.of(whole, allocate)
    assert starts(joined, buffers[0]) == starts(packed, buffers[1])
    assert len(buffers[0]) == len(buffers[1])
    for a, b in zip(joined.columns(), packed.columns(), strict=True):
        assert a.dtype == b.dtype and bytes(a) == bytes(b)


@pytest.mark.parametrize("with_buffer", [False, True])
def test_no_records_join_into_an_empty_batch(with_buffer: bool) -> None:
    batch = PackedBatch.joined(TOPIC, [], (lambda n: np.empty(n, dtype=np.uint8)) if with_buffer else None)
    assert len(batch) == 0 and batch.value_bytes == 0
    assert [c.dtype for c in batch.columns()] == [c.dtype for c in PackedBatch.of(_raw(0, 0)).columns()]


def test_one_consume_call_is_taken_as_it_is_when_no_buffer_is_given() -> None:
    records = _records(_raw(0, 9))
    batch = PackedBatch.joined(TOPIC, [records.parts[0].columns()])
    assert all(a is b for a, b in zip(batch.columns(), records.parts[0].columns(), strict=True))
