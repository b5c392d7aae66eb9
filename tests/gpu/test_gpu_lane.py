"""GPU tier: the device lane on CUDA against the native core, on generated batches (skipped without a GPU).

The same strategies as the CPU compilation of the lane (``tests/unit/gpu_stage/test_gpu_stage_lane.py``),
now through the CUDA kernels: same bytes, same dead letters, and the lane takes every good synthetic row.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_stage import synth
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.batch import RawBatch
from gpu_stage.transform.device.strict import V_UNKNOWN
from gpu_stage.transform.native import NativeBackend
from llmpipe.record import TypedRecord
from tests.gpu.gpu_parity import REASON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"no usable GPU: {REASON}")]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "gpu_stage"))
pytest.importorskip("numba")

from test_gpu_stage_lane import (  # noqa: E402
    ERROR_BODIES,
    INVALID_CONTENT,
    LEFT_CONTENT,
    NOT_ERROR_BODIES,
    NOT_THE_LANES_ERRORS,
    OUT_OF_ORDER,
    VALID_CONTENT,
    WIDE,
    _chat,
    _run,
    _run_packed,
    batches,
    lane_bodies,
)
from test_lane_spans import FREE_TEXT, SUMMARIES, free_text_chat  # noqa: E402
from test_lane_verdict import CONTENT_VERDICTS, EDGE_BODIES, json_texts  # noqa: E402
from test_packed import assert_same_result  # noqa: E402


@pytest.fixture(scope="module")
def lane() -> Any:
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform

    return LaneTransform(TransformSettings(), CudaExecutor)


NATIVE = NativeBackend(TransformSettings())
ROW_PER_THREAD = TransformSettings(lane_order="arrival")
"""Thread ``t`` on row ``t``: the order whose passes launch ``measure`` and ``write`` (the others
launch their ordered twins, see :mod:`gpu_stage.transform.device.order`)."""


def test_synthetic_batches_are_taken_whole(lane: Any) -> None:
    """Every good row and every upstream error body (its dead letter) is the lane's."""
    for size in (1, 1000, 50_000):
        batch = synth.batch(synth.bodies(size), first_offset=size)
        taken, _ = _run(lane, NATIVE, batch)
        assert taken == size


def test_error_bodies_and_invalid_content_on_the_device() -> None:
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform

    values = [*ERROR_BODIES, *NOT_ERROR_BODIES, *NOT_THE_LANES_ERRORS]
    taken, _ = _run(LaneTransform(WIDE, CudaExecutor), NativeBackend(WIDE), synth.batch(values))
    assert taken == len(ERROR_BODIES) + len(NOT_ERROR_BODIES)
    settings = TransformSettings(record=TypedRecord(OUT_OF_ORDER), max_record_bytes=1 << 16)
    contents = [*INVALID_CONTENT, *VALID_CONTENT, *LEFT_CONTENT]
    batch = synth.batch([_chat(c) for c in contents])
    taken, rows = _run(LaneTransform(settings, CudaExecutor), NativeBackend(settings), batch)
    assert taken == rows - len(LEFT_CONTENT) == len(contents) - len(LEFT_CONTENT)


@pytest.fixture(scope="module")
def wide_lane() -> Any:
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform

    return LaneTransform(WIDE, CudaExecutor)


def test_strict_verdicts_on_the_device(wide_lane: Any) -> None:
    """Bodies not UTF-8, not JSON or not an object, and such content: the device writes those dead letters."""
    values = [*EDGE_BODIES, *(_chat(c) for c in CONTENT_VERDICTS)]
    taken, _ = _run(wide_lane, NativeBackend(WIDE), synth.batch(values))
    certain = sum(v != V_UNKNOWN for v in EDGE_BODIES.values()) + sum(v is not None for v in CONTENT_VERDICTS.values())
    assert taken == certain


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(values=st.lists(json_texts(), min_size=1, max_size=64))
def test_generated_verdict_bodies_on_the_device(wide_lane: Any, values: list[bytes]) -> None:
    _run(wide_lane, NativeBackend(WIDE), synth.batch(values))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=batches())
def test_generated_batches(lane: Any, batch: RawBatch) -> None:
    _run(lane, NATIVE, batch)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(lane_bodies(), min_size=1, max_size=64))
def test_bodies_in_the_lanes_subset(lane: Any, values: list[bytes]) -> None:
    _run(lane, NATIVE, synth.batch(values))


def test_the_worker_parse_thread_gives_the_same_bytes() -> None:
    """The worker parses chunks on a thread of its own: the backend built on this thread must work there."""
    from concurrent import futures

    from gpu_stage.transform.gpu import GpuBackend

    backend = GpuBackend(TransformSettings())
    batch = synth.batch(synth.bodies(20_000))
    here = backend.parse(batch)
    with futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="parse") as pool:
        there = [pool.submit(backend.parse, batch.slice(start, end)).result() for start, end in batch.chunks(7_000)]
    assert b"".join(bytes(r.encoded.buf) for r in there) == bytes(here.encoded.buf)
    assert [b.offset for r in there for b in r.bad] == [b.offset for b in here.bad]
    assert backend.lane is not None and backend.lane.taken_rows > 0


def test_a_batch_joined_into_an_input_buffer_and_parsed_in_chunks() -> None:
    """The worker's way: consume calls' columns joined into the backend's input buffer, parsed in chunks.

    Each chunk is a slice of the joined batch, read by the device in place; the pooled buffer is
    taken again for the next batch once the last one's results are let go.
    """
    from gpu_stage.transform.gpu import GpuBackend
    from gpu_stage.transform.packed import PackedBatch

    backend = GpuBackend(TransformSettings())
    assert backend.lane is not None
    values = synth.bodies(25_000)
    whole = NATIVE.parse(synth.batch(values))
    pieces = [PackedBatch.of(raw).columns() for raw in _split(values, [10_000, 7_000, 8_000])]
    addresses = set()
    for _ in range(3):
        batch = PackedBatch.joined("llm.raw", pieces, backend.input_buffer)
        assert backend.lane.packed._in_place(batch.value_buf)
        addresses.add(batch.value_buf.__array_interface__["data"][0])
        chunks = [batch.slice(start, end) for start, end in batch.chunks(10_000)]
        results = [next(iter(backend.parse_stream([chunk], overlap=False))) for chunk in chunks]
        assert b"".join(bytes(r.encoded.buf) for r in results) == bytes(whole.encoded.buf)
        assert [b.offset for r in results for b in r.bad] == [b.offset for b in whole.bad]
        del batch, chunks, results
    assert len(addresses) == 1  # the same page-locked buffer each time


def _split(values: list[bytes], sizes: list[int]) -> list[RawBatch]:
    raws, at = [], 0
    for size in sizes:
        raws.append(synth.batch(values[at : at + size], first_offset=at))
        at += size
    return raws


@pytest.mark.parametrize(("overlap", "in_place"), [(True, False), (False, False), (True, True), (False, True)])
def test_packed_stream_on_the_device(lane: Any, overlap: bool, in_place: bool) -> None:
    """Batches that grow, shrink and repeat in both slots (an empty one among them), every result held."""
    sizes = [50_000, 1, 0, 20_000, 60_000, 5, 30_000]
    values = synth.bodies(sum(sizes))
    taken = _run_packed(lane, NATIVE, _split(values, sizes), overlap, in_place)
    assert taken == len(values)  # the error bodies' dead letters included


def test_packed_stream_with_pass_2_on_two_streams() -> None:
    """The same batches with pass 2 written on a stream per output buffer: the same bytes as the native core."""
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform

    fresh = LaneTransform(TransformSettings(), CudaExecutor)
    fresh.executor.write_streams = 2
    sizes = [50_000, 1, 0, 20_000, 60_000, 5, 30_000]
    values = synth.bodies(sum(sizes))
    for in_place in (False, True):
        assert _run_packed(fresh, NATIVE, _split(values, sizes), True, in_place) == len(values)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raws=st.lists(batches(), min_size=1, max_size=3), in_place=st.booleans())
def test_packed_stream_of_generated_batches(lane: Any, raws: list[RawBatch], in_place: bool) -> None:
    _run_packed(lane, NATIVE, raws, in_place=in_place)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(lane_bodies(), min_size=1, max_size=64), split=st.integers(0, 64))
def test_packed_bodies_in_the_lanes_subset(lane: Any, values: list[bytes], split: int) -> None:
    _run_packed(lane, NATIVE, [synth.batch(values[:split]), synth.batch(values[split:], first_offset=split)])


def test_the_backend_streams_packed_batches_and_counts_them() -> None:
    from gpu_stage.transform.gpu import GpuBackend
    from gpu_stage.transform.packed import PackedBatch

    backend = GpuBackend(TransformSettings())
    values = synth.bodies(25_000)
    # an id of the wrong type: dead letters the native core finds (the lane writes only constant texts)
    cut = [i for i in range(0, len(values), 1000) if not values[i].startswith(b'{"error"')]
    for i in cut:
        values[i] = values[i].replace(b'{"id":"', b'{"id":7,"x":"', 1)
    errors = sum(v.startswith(b'{"error"') for v in values)
    raws = _split(values, [10_000, 10_000, 5_000])
    results = list(backend.parse_stream(PackedBatch.of(raw) for raw in raws))
    for raw, got in zip(raws, results, strict=True):
        assert_same_result(NATIVE.parse(raw), got)
    assert backend.stats.rows == 25_000 and backend.stats.batches == 3
    assert backend.stats.slow_rows == len(cut)
    assert sum(len(r.bad) for r in results) == len(cut) + errors > len(cut)


def test_a_stream_whose_results_are_let_go_reuses_two_output_buffers() -> None:
    """Neither the backend nor the lane holds a result once it is yielded (each pins a pooled buffer).

    Two, not one: batch k+1's pass 2 is queued, into a buffer of its own, before batch k is yielded.
    """
    from gpu_stage.transform.gpu import GpuBackend
    from gpu_stage.transform.packed import PackedBatch

    backend = GpuBackend(TransformSettings())
    pool = backend.lane.packed.pool
    made: list[int] = []
    allocate = pool._allocate
    pool._allocate = lambda size: (made.append(size), allocate(size))[1]
    values = synth.bodies(60_000)
    for result in backend.parse_stream(PackedBatch.of(raw) for raw in _split(values, [10_000] * 6)):
        assert len(result.encoded) > 0
        del result
    assert len(made) == 2


def test_a_batch_in_an_input_buffer_goes_to_the_device_in_one_copy() -> None:
    """In place, a batch is one copy (no column copied on its own); copied in, one copy per column.

    A slot keeps the device buffers of the way its last batch came, not those of both.
    """
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform
    from gpu_stage.transform.packed import PackedBatch

    fresh = LaneTransform(TransformSettings(), CudaExecutor)
    executor = fresh.executor
    each = executor._put_each
    calls: list[int] = []
    executor._put_each = lambda *args: calls.append(1) or each(*args)  # type: ignore[method-assign]
    raws = _split(synth.bodies(12_000), [5_000, 4_000, 3_000])
    for in_place in (False, True, False):
        calls.clear()
        allocate = fresh.packed.input_buffer if in_place else None
        results = list(fresh.packed.stream(PackedBatch.of(raw, allocate) for raw in raws))
        for raw, got in zip(raws, results, strict=True):
            assert_same_result(NATIVE.parse(raw), got)
        assert len(calls) == (0 if in_place else 3)
        held = set(executor._arrays)
        assert {"0.block" in held, "1.block" in held} == {in_place}
        assert {"0.values" in held, "1.values" in held} == {not in_place}


@pytest.mark.parametrize("write_streams", [1, 2])
def test_pass_2_writes_through_two_device_buffers_the_size_of_a_piece(write_streams: int) -> None:
    """Output pieces of a few KiB: the same results, and each of the two output buffers holds one piece.

    The pieces take turns in the buffers, each copied out on the copy stream while the next is written,
    so a piece whose launch did not wait for its buffer's copy before would overwrite bytes not yet out.
    On two write streams, two pieces are written at once, and a slot's next batch must not overwrite
    its inputs before both streams are done with them.
    """
    from gpu_stage.transform.device.cuda import OUT_BUFFERS, CudaExecutor, capacity
    from gpu_stage.transform.device.lane import LaneTransform
    from gpu_stage.transform.packed import PackedBatch

    fresh = LaneTransform(TransformSettings(), CudaExecutor)
    fresh.executor.write_piece_bytes = 4096
    fresh.executor.write_streams = write_streams
    values = synth.bodies(9_000)
    raws = _split(values, [2_000, 1_000, 2_500, 2_000, 1_500])
    results = list(fresh.packed.stream(PackedBatch.of(raw, fresh.packed.input_buffer) for raw in raws))
    for raw, got in zip(raws, results, strict=True):
        assert_same_result(NATIVE.parse(raw), got)
    largest_row = max(int(d) for r in results for d in np.diff(r.encoded.offsets))
    held = {name: a.shape[0] for name, a in fresh.executor._arrays.items() if name.startswith("out")}
    assert set(held) == {f"out.{b}" for b in range(OUT_BUFFERS)}
    assert all(size <= capacity(4096 + largest_row, np.uint8) for size in held.values())  # a piece, with headroom
    assert sum(held.values()) < min(int(r.encoded.offsets[-1]) for r in results)


def test_batches_of_one_size_reuse_their_device_arrays_launch_after_launch() -> None:
    """In place, a stream of batches of one record count converts the launch parameters of no new array
    but the headers' (which follow the values, whose length varies) once per batch and kernel.

    Byte buffers go to the kernels whole and each column's view of a slot's block is kept while its
    place stays, so the thread that feeds the device makes no view and converts nothing for them.
    """
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform
    from gpu_stage.transform.packed import PackedBatch

    fresh = LaneTransform(ROW_PER_THREAD, CudaExecutor)  # the launches of measure and write themselves
    executor = fresh.executor
    raws = _split(synth.bodies(16_000), [2_000] * 8)
    # A first stream grows the buffers to these batches' largest; the second reuses them.
    warm = list(fresh.packed.stream(PackedBatch.of(raw, fresh.packed.input_buffer) for raw in raws))
    before = (len(executor.measure._arrays), len(executor.write._arrays))
    assert warm and min(before) > 0  # launched directly, parameters kept
    results = list(fresh.packed.stream(PackedBatch.of(raw, fresh.packed.input_buffer) for raw in raws))
    for raw, got in zip(raws, results, strict=True):
        assert_same_result(NATIVE.parse(raw), got)
    grown = [len(executor.measure._arrays) - before[0], len(executor.write._arrays) - before[1]]
    assert max(grown) <= len(raws), grown  # the headers' view; every other array is the one kept


def test_kernels_after_the_first_launch_go_to_the_driver_directly() -> None:
    """The same results, with every launch after each kernel's first made without the dispatcher.

    Batches of three sizes, in place and copied in, with pass 2 in small pieces: array parameters
    kept from one launch are reused for the next only while the arrays are the same.
    """
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform
    from gpu_stage.transform.packed import PackedBatch

    fresh = LaneTransform(ROW_PER_THREAD, CudaExecutor)  # the launches of measure and write themselves
    executor = fresh.executor
    executor.write_piece_bytes = 64 << 10
    raws = _split(synth.bodies(9_000), [4_000, 3_000, 2_000])
    for in_place in (True, False, True):
        allocate = fresh.packed.input_buffer if in_place else None
        for raw, got in zip(raws, fresh.packed.stream(PackedBatch.of(raw, allocate) for raw in raws), strict=True):
            assert_same_result(NATIVE.parse(raw), got)
    assert (executor.measure.dispatched, executor.write.dispatched) == (1, 1)
    assert executor.measure.direct == 3 * len(raws) - 1
    assert executor.write.direct > 3 * len(raws)


@pytest.mark.parametrize("order", ["arrival", "balanced"])
def test_the_pass_kernels_resources_are_read_from_the_driver(order: str) -> None:
    """Once launched, each pass's kernel has a whole resources report (what the benchmarks write as
    ``kernels``): its registers, machine code and the blocks an SM keeps resident, consistent with
    each other."""
    from dataclasses import replace

    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform

    fresh = LaneTransform(replace(WIDE, lane_order=order), CudaExecutor)
    _run(fresh, NativeBackend(WIDE), synth.batch(synth.bodies(2_000)))
    found = fresh.executor.kernel_resources()
    names = ("measure", "write") if order == "arrival" else ("measure_ordered", "write_ordered")
    assert set(names) <= set(found)
    for name in names:
        report = found[name]
        assert report["code_bytes"] and report["sms"] and report["max_warps_per_sm"]
        threads = report["blocks_per_sm"] * report["threads_per_block"]
        assert 0 < threads * report["registers_per_thread"] <= 65_536  # an SM's register file holds them
        assert report["warps_per_sm"] <= report["max_warps_per_sm"]


@pytest.mark.parametrize("order", ["arrival", "balanced"])
def test_a_register_cap_builds_pass_1_apart_and_changes_no_byte(order: str) -> None:
    """``lane_registers`` 96 (the default): pass 1's kernel takes at most 96 registers per thread, so more
    of its blocks stay resident than uncapped (0), and 20 k real-shaped bodies come out as the native
    core writes them."""
    from dataclasses import replace

    from bench import real_corpus
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.kernels import compile_lane
    from gpu_stage.transform.device.lane import LaneTransform

    capped = LaneTransform(replace(WIDE, lane_order=order), CudaExecutor)
    plain = LaneTransform(replace(WIDE, lane_order=order, lane_registers=0), CudaExecutor)
    native = NativeBackend(WIDE)
    raw = _split(real_corpus.generate(20_000).values, [20_000])[0]
    for lane in (capped, plain):
        taken, _ = _run(lane, native, raw)
        assert taken > 0.95 * len(raw)
    name = "measure" if order == "arrival" else "measure_ordered"
    mine, theirs = capped.executor.kernel_resources()[name], plain.executor.kernel_resources()[name]
    assert mine["registers_per_thread"] <= 96 < theirs["registers_per_thread"]
    assert mine["blocks_per_sm"] > theirs["blocks_per_sm"]
    assert capped.executor.measure_registers == 96 and plain.executor.measure_registers is None
    for lane, cap in ((capped, 96), (plain, 0)):  # one build of the lane serves both passes
        executor = lane.executor
        assert executor.fns is compile_lane("cuda", WIDE.kernel_cache, cap)
        assert executor.measure.dispatcher is executor.fns.measure
        assert executor.write.dispatcher is executor.fns.write


@pytest.mark.parametrize("order", ["length", "balanced", "arrival", "warp"])
def test_rows_by_length_or_as_they_came_give_the_same_bytes(order: str) -> None:
    """Bodies of 400 B to 32 KB: threads taking the rows by length class (pass 1, and each of pass 2's
    pieces: the output in one piece, in 1 MiB pieces, in the lane's), those rows dealt round the
    warps, as they came, or a warp per row in pass 1 write the native core's bytes, a batch at a time
    and streamed.
    """
    from dataclasses import replace

    from bench import corpus
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform
    from gpu_stage.transform.packed import PackedBatch

    fresh = LaneTransform(replace(WIDE, lane_order=order), CudaExecutor)
    assert fresh.executor.lane_order == order
    values = corpus.generate(corpus.CorpusConfig(records=30_000)).values
    raws = _split(values, [20_000, 3, 9_997])
    native = NativeBackend(WIDE)
    for piece in (0, 1 << 20, fresh.executor.write_piece_bytes):
        fresh.executor.write_piece_bytes = piece
        taken, good = _run(fresh, native, raws[0])
        assert taken > 0.9 * len(raws[0]) and good > 0
        results = fresh.packed.stream(PackedBatch.of(raw, fresh.packed.input_buffer) for raw in raws)
        for raw, got in zip(raws, results, strict=True):
            assert_same_result(native.parse(raw), got)


@pytest.mark.parametrize(("pass_1", "write_warp"), [("warp", 0), ("warp", 1), ("balanced", 1)])
@pytest.mark.parametrize("kind", ["real", "escapes"])
def test_a_warp_per_row_gives_the_native_cores_bytes(kind: str, pass_1: str, write_warp: int) -> None:
    """``warp`` on 100 k real-shaped bodies and 100 k bodies full of escapes, in 10 k batches, pass 2
    a thread or a warp per row (and a warp per row after ``balanced``): the warp's ballots (the CPU
    build runs its lanes one after another) write the native core's bytes, and pass 1 gives each row
    the size one thread per row gives it.
    """
    from dataclasses import replace

    from bench import escape_corpus, real_corpus
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform

    values = (real_corpus.generate(100_000) if kind == "real" else escape_corpus.escape_bodies(100_000)).values
    warp = LaneTransform(replace(WIDE, lane_order=pass_1), CudaExecutor)
    warp.executor.write_warp = write_warp
    one_thread = LaneTransform(WIDE, CudaExecutor)
    native = NativeBackend(WIDE)
    for raw in _split(values, [10_000] * 10):
        taken, good = _run(warp, native, raw)
        assert taken > 0.95 * len(raw) and good > 0
        assert warp.measure(raw).tolist() == one_thread.measure(raw).tolist()


@pytest.mark.parametrize("spans", [0, 1, 8])
@pytest.mark.parametrize("kind", ["real", "escapes", "free-text"])
def test_pass_2s_spans_give_the_native_cores_bytes(kind: str, spans: int) -> None:
    """Pass 2 a thread per row leaving none, one or eight long strings a row to the warp-a-row copy, the
    output in one piece and in 1 MiB pieces: real-shaped bodies, bodies full of escapes, and a content
    schema with free text whose long strings the copy decodes.
    """
    from dataclasses import replace

    from bench import escape_corpus, real_corpus
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform

    settings = replace(WIDE, record=TypedRecord(FREE_TEXT)) if kind == "free-text" else WIDE
    if kind == "free-text":
        values = [free_text_chat(SUMMARIES[k % len(SUMMARIES)], k) for k in range(30_000)]
    elif kind == "real":
        values = real_corpus.generate(30_000, seed=3).values
    else:
        values = escape_corpus.escape_bodies(30_000).values
    lane = LaneTransform(settings, CudaExecutor)
    lane.executor.write_spans = spans
    native = NativeBackend(settings)
    for piece in (0, 1 << 20):
        lane.executor.write_piece_bytes = piece
        for raw in _split(values, [20_000, 10_000]):
            taken, good = _run(lane, native, raw)
            assert taken > 0.95 * len(raw) and good > 0


@pytest.mark.parametrize("device_wait", ["poll", "block"])
def test_each_way_of_waiting_for_the_device_gives_the_same_bytes(device_wait: str) -> None:
    """``poll`` and ``block`` (events made for blocking waits) wait for every pass, streamed and a batch
    at a time: the native core's bytes on 30 k real-shaped bodies, in batches of 20 k, 3 and 9,997.
    """
    from dataclasses import replace

    from bench import real_corpus
    from gpu_stage.transform.device.cuda import CudaExecutor
    from gpu_stage.transform.device.lane import LaneTransform
    from gpu_stage.transform.packed import PackedBatch

    fresh = LaneTransform(replace(WIDE, device_wait=device_wait), CudaExecutor)
    assert fresh.executor.device_wait == device_wait
    raws = _split(real_corpus.generate(30_000).values, [20_000, 3, 9_997])
    native = NativeBackend(WIDE)
    taken, good = _run(fresh, native, raws[0])
    assert taken > 0.95 * len(raws[0]) and good > 0
    results = fresh.packed.stream(PackedBatch.of(raw, fresh.packed.input_buffer) for raw in raws)
    for raw, got in zip(raws, results, strict=True):
        assert_same_result(native.parse(raw), got)
