"""Packed batches (contiguous buffers) and the native core reading them in place.

A packed batch must hold exactly the records it was packed from (keys that are None or empty,
header values that are None, repeated headers), and the native core must give the same rows, keys
and dead letters from it as from the batch of Python objects, for the whole batch and for any
subset of its positions.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_gpu_stage_native import CONTENT_SCHEMAS, _settings, batches

from gpu_stage import synth
from gpu_stage.transform.batch import ParseResult, RawBatch
from gpu_stage.transform.native import NativeBackend
from gpu_stage.transform.packed import PackedBatch, encode_headers
from gpu_stage.transform.pool import HostPool
from tests.vectors import batch_of, load_vectors

NATIVE = {name: NativeBackend(_settings(name)) for name in CONTENT_SCHEMAS}


def assert_same_result(want: ParseResult, got: ParseResult) -> None:
    """Same rows, offsets, bytes, keys and dead letters (``got`` may hold a view and lazy keys)."""
    assert got.encoded.rows.tolist() == want.encoded.rows.tolist()
    assert got.encoded.offsets.tolist() == want.encoded.offsets.tolist()
    assert bytes(got.encoded.buf) == bytes(want.encoded.buf)
    assert list(got.encoded.keys) == list(want.encoded.keys)
    assert got.bad == want.bad


def _odd_batch() -> RawBatch:
    return RawBatch(
        values=[b'{"a":1}', b"", b"\xff\xfe"],
        keys=[None, b"", b"k\x00"],
        headers=[
            [("latency.ms", b"7"), ("latency.ms", b"8"), ("x", b"")],
            [],
            [("attributes", None), ("h\u00e9", b"\x00\x01")],  # type: ignore[list-item]
        ],
        topic="t",
        partitions=[0, 1, 2],
        offsets=[5, 6, 7],
        timestamps_ms=[-1, 0, 2**62],
    )


def test_packing_keeps_every_record_as_it_was() -> None:
    raw = _odd_batch()
    packed = PackedBatch.of(raw)
    assert len(packed) == 3 and packed.value_bytes == 9
    assert list(packed.values) == list(raw.values)
    assert list(packed.keys) == [None, b"", b"k\x00"]
    assert list(packed.headers) == [list(h) for h in raw.headers]
    assert packed.headers[-1] == [("attributes", None), ("h\u00e9", b"\x00\x01")]
    assert packed.keys[1:] == [b"", b"k\x00"]
    back = packed.to_raw()
    assert back.offsets.tolist() == [5, 6, 7] and back.timestamps_ms.tolist() == [-1, 0, 2**62]
    with pytest.raises(IndexError):
        packed.values[3]


def test_dead_letters_found_apart_are_merged_in_batch_order_when_read() -> None:
    from gpu_stage.transform.device.merge import LaneFound
    from gpu_stage.transform.device.slots import UPSTREAM_ERROR

    raw = _odd_batch()
    packed = PackedBatch.of(raw)
    _, _, _, native = NATIVE["default"].run_packed(packed, np.array([0, 2], dtype=np.int64))
    merged = native.with_found(LaneFound.of(np.array([10, UPSTREAM_ERROR, 10], dtype=np.int64)))
    assert len(merged) == 3 and merged._parts[1]  # nothing merged yet
    assert [d.reason.value for d in merged] == ["missing_field", "upstream_error", "invalid_utf8"]
    assert [d.offset for d in merged] == [5, 6, 7] and merged[1].raw == raw.values[1]
    assert merged[1].error == "upstream error body"


def test_dead_letters_of_a_packed_batch_are_made_when_read() -> None:
    """The core returns position, reason and text; each record's bytes, key and headers come from the batch."""
    raw = _odd_batch()
    packed = PackedBatch.of(raw)
    _, _, rows, dead = NATIVE["default"].run_packed(packed)
    assert rows.tolist() == [] and len(dead) == 3
    assert [found[0] for found in dead._found()] == [0, 1, 2]  # positions only, no record objects yet
    made = list(dead)
    assert [d.raw for d in made] == list(raw.values) and [d.key for d in made] == list(raw.keys)
    assert [(d.topic, d.partition, d.offset) for d in made] == [("t", 0, 5), ("t", 1, 6), ("t", 2, 7)]
    assert made[2].source_headers == (("attributes", None), ("h\u00e9", b"\x00\x01"))
    assert [d.reason.value for d in made] == ["missing_field", "invalid_json", "invalid_utf8"]
    want = NATIVE["default"].parse(raw).bad
    assert dead == want and want == dead and dead[1:] == want[1:] and dead[-1] == want[-1]
    assert dead != want[:2] and dead != "abc"
    _, _, _, picked = NATIVE["default"].run_packed(packed, np.array([2], dtype=np.int64))
    assert picked == [want[2]]
    import llmpipe_native

    with pytest.raises(ValueError, match="outside the batch"):
        llmpipe_native.records_at(packed.columns(), np.array([3], dtype=np.int64))


def test_an_empty_batch() -> None:
    packed = PackedBatch.of(RawBatch.of_values([]))
    assert len(packed) == 0 and packed.value_bytes == 0
    result = NATIVE["default"].parse_packed(packed)
    assert len(result) == 0


@pytest.mark.parametrize("schema", sorted(CONTENT_SCHEMAS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=batches(), data=st.data())
def test_native_reads_packed_batches_in_place(schema: str, batch: RawBatch, data: st.DataObject) -> None:
    native = NATIVE[schema]
    packed = PackedBatch.of(batch)
    assert_same_result(native.parse(batch), native.parse_packed(packed))
    picks = sorted(data.draw(st.sets(st.integers(0, len(batch) - 1))))
    buf, ends, rows, bad = native.run_packed(packed, np.array(picks, dtype=np.int64))
    subset = native.parse(RawBatch(
        values=[batch.values[i] for i in picks],
        keys=[batch.keys[i] for i in picks],
        headers=[batch.headers[i] for i in picks],
        topic=batch.topic,
        partitions=[batch.partitions[i] for i in picks],
        offsets=[batch.offsets[i] for i in picks],
        timestamps_ms=[batch.timestamps_ms[i] for i in picks],
    ))  # fmt: skip
    assert buf == subset.encoded.buf
    assert ends.tolist() == subset.encoded.offsets[1:].tolist()
    assert rows.tolist() == [picks[i] for i in subset.encoded.rows.tolist()]
    assert bad == subset.bad


def test_shared_vectors_and_synthetic_bodies() -> None:
    native = NATIVE["default"]
    for raw in (batch_of(load_vectors()), synth.batch(synth.bodies(3000))):
        result = native.parse_packed(PackedBatch.of(raw))
        assert_same_result(native.parse(raw), result)
        assert len(result.bad) > 0  # both sets hold dead letters, which carry their record back
        first = result.bad[0]
        i = [int(o) for o in raw.offsets].index(first.offset)
        assert first.raw == raw.values[i] and first.source_headers == tuple(raw.headers[i])


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_records_split_over_threads_give_the_same_result(threads: int) -> None:
    """Runs of consecutive records on several threads, joined in order: rows, bytes and dead letters as one run."""
    settings = dataclasses.replace(_settings("default"), max_record_bytes=1 << 20)
    one, split = NativeBackend(settings), NativeBackend(settings, threads=threads)
    values = synth.bodies(9000)
    raw = synth.batch(values)
    packed = PackedBatch.of(raw)
    every_other = np.arange(1, len(values), 2, dtype=np.int64)  # 4,500: a run of 512 or more per thread
    for positions in (None, every_other):
        want, got = one.run_packed(packed, positions), split.run_packed(packed, positions)
        assert bytes(got[0]) == bytes(want[0])
        assert got[1].tolist() == want[1].tolist() and got[2].tolist() == want[2].tolist()
        assert got[3] == want[3] and len(want[3]) > 0
    assert_same_result(one.parse(raw), split.parse(raw))


@pytest.mark.parametrize("threads", [1, 3])
def test_a_run_started_on_a_native_thread_gives_what_run_packed_gives(threads: int) -> None:
    """``start_packed``: the same bytes, ends, rows and dead letters, for some rows, every row and none."""
    settings = dataclasses.replace(_settings("default"), max_record_bytes=1 << 20)
    native = NativeBackend(settings, threads=threads)
    raw = synth.batch(synth.bodies(3000))
    packed = PackedBatch.of(raw)
    some = np.arange(0, len(raw), 3, dtype=np.int64)
    for positions in (some, None, np.zeros(0, dtype=np.int64)):
        want = native.run_packed(packed, positions)
        run = native.start_packed(packed, positions)
        got = run.result()
        assert bytes(got[0]) == bytes(want[0])
        assert got[1].tolist() == want[1].tolist() and got[2].tolist() == want[2].tolist()
        assert got[3] == want[3]
        assert run.seconds >= 0.0
    assert len(native.run_packed(packed, some)[3]) > 0  # the rows picked include dead letters


def test_the_thread_taking_a_native_runs_result_does_the_chunks_left() -> None:
    """With no native thread, ``result()`` transforms every chunk (of 64 records) itself: the same output."""
    native = NATIVE["default"]
    raw = synth.batch(synth.bodies(1000))
    packed = PackedBatch.of(raw)
    want = native._core.run_packed(packed.columns(), None, 1)
    alone = native._core.start_packed(packed.columns(), None, 0)
    assert alone.result() == want
    assert alone.helped == -(-1000 // 64) and alone.seconds == 0.0


def test_a_native_run_gives_its_result_once_and_may_be_let_go_unread() -> None:
    native = NATIVE["default"]
    packed = PackedBatch.of(synth.batch(synth.bodies(600)))
    run = native.start_packed(packed, np.arange(0, 600, 2, dtype=np.int64))
    run.result()
    with pytest.raises(ValueError, match="was taken"):
        run.result()
    unread = native.start_packed(packed)
    del unread  # joins its thread before the batch's buffers are let go
    with pytest.raises(ValueError, match="outside the batch"):
        native.start_packed(packed, np.array([600], dtype=np.int64))


def test_malformed_columns_are_refused() -> None:
    native = NATIVE["default"]
    packed = PackedBatch.of(_odd_batch())
    cut = packed.header_buf[:-1]
    broken = dataclasses.replace(packed, header_buf=cut)
    with pytest.raises(ValueError, match=r"past the buffer|malformed"):
        native.parse_packed(broken)
    ragged = dataclasses.replace(packed, offsets=packed.offsets[:2])
    with pytest.raises(ValueError, match="differ in length"):
        native.parse_packed(ragged)
    with pytest.raises(ValueError, match="outside the batch"):
        native.run_packed(packed, np.array([3], dtype=np.int64))


def test_header_encoding_is_what_the_native_core_decodes() -> None:
    import llmpipe_native

    pairs = [("a", b"1"), ("", b""), ("b", None), ("\u00fc", b"\xff" * 300)]
    raw = encode_headers(pairs)
    buf = np.frombuffer(raw, dtype=np.uint8)
    assert llmpipe_native.headers_at(buf, np.array([len(raw)], dtype=np.int64), 0) == pairs
    assert raw[:5] == b"\x01\x00\x00\x00a"


def test_pooled_buffers_are_reused_only_once_nothing_refers_to_them() -> None:
    made: list[int] = []
    mib = 1 << 20

    def allocate(size: int) -> np.ndarray:
        made.append(size // mib)
        return np.zeros(size, dtype=np.uint8)

    pool = HostPool(allocate, keep=2)
    first = pool.take(3 * mib)  # an eighth more, in whole MiB: 4
    view = first.data[:50]
    del first
    second = pool.take(5 * mib // 2)  # the first is still seen through ``view``: 3 MiB
    assert made == [4, 3]
    sub = memoryview(view)[10:20]  # a view of the view holds the buffer too
    del view, second
    third = pool.take(7 * mib // 2)  # the second buffer (3 MiB) is free but too small: it is replaced
    assert made == [4, 3, 4]
    del sub
    fourth = pool.take(mib)  # the first buffer is free again
    assert len(fourth) == 4 * mib and made == [4, 3, 4]
    assert pool.held_bytes() == 8 * mib
    del fourth
    again = pool.take(4 * mib)  # a slightly larger batch fits the room left: nothing new
    assert made == [4, 3, 4] and len(again) == 4 * mib
    del third, again


def test_the_native_backends_input_buffers_are_reused_once_nothing_holds_them() -> None:
    native = NativeBackend(_settings("default"))
    first = native.input_buffer(1000)
    address = first.__array_interface__["data"][0]
    view = first[10:20]
    del first
    second = native.input_buffer(900)  # the first is still seen through ``view``: a new one
    assert second.__array_interface__["data"][0] != address and len(second) >= 901
    del view
    third = native.input_buffer(800)  # the first is free again
    assert third.__array_interface__["data"][0] == address
    del second, third
