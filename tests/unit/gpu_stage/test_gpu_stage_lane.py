"""The device lane's code, compiled for the CPU, against the native core: same bytes, same dead letters.

The lane (``gpu_stage/transform/device/``) is the GPU backend's hot path; here numba compiles the very
same source for the CPU, so its logic is held to the native core on every shared vector, the real
corpus, generated batches (hypothesis, the native tests' strategies plus bodies in the lane's own
subset), and synthetic bodies. Identity alone could hold with a lane that takes nothing (the native
core would do every row), so the tests also assert which rows the lane takes.
"""

from __future__ import annotations

import io
import json
import math
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba")

from test_gpu_stage_native import CONTENT_SCHEMAS, _assert_same, _settings, batches
from test_packed import assert_same_result

from gpu_stage import synth
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.batch import RawBatch
from gpu_stage.transform.device.executor import CpuExecutor
from gpu_stage.transform.device.kernels import compile_lane
from gpu_stage.transform.device.lane import LaneTransform
from gpu_stage.transform.device.packed import _lane_input
from gpu_stage.transform.native import NativeBackend
from gpu_stage.transform.packed import PackedBatch
from llmpipe.errors import ConfigError
from llmpipe.record import TypedRecord
from tests.vectors import batch_of, load_vectors

CORPUS = Path(__file__).resolve().parents[4] / "shared" / "corpus" / "vllm_real"
LANES = {name: LaneTransform(_settings(name), CpuExecutor) for name in CONTENT_SCHEMAS}
NATIVE = {name: NativeBackend(_settings(name)) for name in CONTENT_SCHEMAS}
WIDE = TransformSettings(max_record_bytes=1 << 20)
WIDE_PAIR = (LaneTransform(WIDE, CpuExecutor), NativeBackend(WIDE))


def _run(lane: LaneTransform, native: NativeBackend, batch: RawBatch) -> tuple[int, int]:
    """Compare one batch; ``(rows the lane took, good rows)``."""
    before = lane.taken_rows
    native_result = native.parse(batch)
    _assert_same(native_result, lane.parse(batch))
    return lane.taken_rows - before, len(native_result.encoded)


def _run_packed(
    lane: LaneTransform, native: NativeBackend, raws: list[RawBatch], overlap: bool = True, in_place: bool = False
) -> int:
    """Stream the batches packed through the lane, every result held to the end; rows the lane took.

    ``in_place`` packs the values into the lane's own input buffers, which it must read with no copy.
    """
    before, copied = lane.packed.taken_rows, lane.packed.copied_batches
    allocate = lane.packed.input_buffer if in_place else None
    results = list(lane.packed.stream([PackedBatch.of(raw, allocate) for raw in raws], overlap))
    assert len(results) == len(raws)
    nonempty = sum(len(raw) > 0 for raw in raws)
    assert lane.packed.copied_batches - copied == (0 if in_place else nonempty)
    for raw, got in zip(raws, results, strict=True):
        assert_same_result(native.parse(raw), got)
    return lane.packed.taken_rows - before


@pytest.mark.parametrize(("overlap", "in_place"), [(True, False), (False, False), (True, True), (False, True)])
def test_packed_stream_of_batches_of_every_size(overlap: bool, in_place: bool) -> None:
    """Sizes that shrink, grow and repeat (buffers reused and grown per slot), an empty batch among them."""
    values = synth.bodies(6001)
    sizes = [3000, 1, 0, 500, 2500]
    raws, at = [], 0
    for size in sizes:
        raws.append(synth.batch(values[at : at + size], first_offset=at))
        at += size
    taken = _run_packed(LaneTransform(WIDE, CpuExecutor), NativeBackend(WIDE), raws, overlap, in_place)
    assert any(v.startswith(b'{"error"') for v in values)
    assert taken == at  # the error bodies' dead letters included


class _Recording(CpuExecutor):
    """The CPU executor, each call logged as (step, batch): the order a stream queues a batch's passes in."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.calls: list[tuple[str, int]] = []
        self._batches: dict[int, int] = {}

    def submit(self, li: Any, n: int, slot: int) -> Any:
        handle = super().submit(li, n, slot)
        self._batches[id(handle)] = int(li.offsets[0])
        self.calls.append((f"submit@{slot}", int(li.offsets[0])))
        return handle

    def sizes(self, handle: Any) -> Any:
        self.calls.append(("sizes", self._batches[id(handle)]))
        return super().sizes(handle)

    def submit_write(self, handle: Any, *args: Any) -> None:
        self.calls.append(("write", self._batches[id(handle)]))
        super().submit_write(handle, *args)


@pytest.mark.parametrize("slots", [2, 3, 4])
def test_a_stream_keeps_as_many_batches_as_slots_on_the_device(slots: int) -> None:
    """Batch k goes into slot k mod S, only after the batch before it there has its pass 2 queued.

    And before this thread waits for a batch's pass 1, the S - 1 batches after the one whose pass 2
    is queued have their pass 1 queued too (fewer at the stream's end); the output is the native
    core's whichever the slots.
    """
    lane = LaneTransform(replace(WIDE, lane_slots=slots), _Recording)
    executor = lane.executor
    assert isinstance(executor, _Recording) and executor.slots == slots
    values = synth.bodies(700)
    raws = [synth.batch(values[i : i + 100], first_offset=i) for i in range(0, 700, 100)]
    assert _run_packed(lane, NativeBackend(WIDE), raws) > 0
    batch = {i: k for k, i in enumerate(range(0, 700, 100))}  # first offset -> batch number
    calls = [(step, batch[first]) for step, first in executor.calls]
    at = {call: i for i, call in enumerate(calls)}
    for k in range(len(raws)):
        assert (f"submit@{k % slots}", k) in at
        if k >= slots:
            assert at[("write", k - slots)] < at[(f"submit@{k % slots}", k)]
    for k in range(1, len(raws)):
        queued = {b for step, b in calls[: at[("sizes", k)]] if step.startswith("submit")}
        assert max(queued) == min(k + slots - 2, len(raws) - 1)


def test_the_lane_slots_are_checked_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """3 by default, 2 to 4 by a flag or its env var; anything else one line naming both."""
    from gpu_stage.settings import parse

    assert parse([])[1].lane_slots == TransformSettings().lane_slots == 3
    assert parse(["--lane-slots", "2"])[1].lane_slots == 2
    monkeypatch.setenv("GPU_STAGE_LANE_SLOTS", "4")
    assert parse([])[1].lane_slots == 4
    for bad in ("1", "5", "two"):
        monkeypatch.setenv("GPU_STAGE_LANE_SLOTS", bad)
        with pytest.raises(ConfigError) as refused:
            parse([])
        assert str(refused.value).startswith("GPU_STAGE_LANE_SLOTS (--lane-slots) must be an integer in [2, 4]")


def test_a_batch_packed_into_an_input_buffer_goes_to_the_device_from_there() -> None:
    """Every column of a batch packed into the lane's input buffer is read in place (no staging copy)."""
    lane = WIDE_PAIR[0].packed
    raw = synth.batch(synth.bodies(50))
    in_place = _lane_input(PackedBatch.of(raw, lane.input_buffer), None, lane._holder)
    assert in_place.pinned == set(in_place.columns())
    elsewhere = PackedBatch.of(raw)
    copied = _lane_input(elsewhere, lane.executor.staging(elsewhere.value_bytes + 1), lane._holder)
    assert copied.pinned == set()
    assert copied.block is None and copied.block_layout() is None


def test_a_batch_in_one_input_buffer_is_laid_out_for_one_copy() -> None:
    """The block layout gives each column's offset in the buffer; the copied span holds every byte of each."""
    lane = WIDE_PAIR[0].packed
    raw = synth.batch(synth.bodies(40), first_offset=7)
    li = _lane_input(PackedBatch.of(raw, lane.input_buffer), None, lane._holder)
    layout = li.block_layout()
    assert li.block is not None and layout is not None
    span, columns = layout
    assert set(columns) == {"values", *li.columns()}
    block = li.block[:span]
    for name, (at, column) in columns.items():
        assert at % column.dtype.itemsize == 0
        assert block[at : at + column.nbytes].view(column.dtype).tolist() == column.tolist(), name
    assert columns["offsets"][1].tolist() == list(range(7, 47))


def test_in_one_input_buffer_the_columns_lie_where_the_record_count_puts_them() -> None:
    """Two batches of one record count whose values differ in length: every column but the headers in one place.

    The per-record columns come first, then the keys (one length each here) and the values; the
    headers last. A device lane keeps each column's view while its place stays.
    """
    lane = WIDE_PAIR[0].packed
    short, long = (synth.batch([_chat("x" * size)] * 30) for size in (10, 500))
    places = []
    for raw in (short, long):
        li = _lane_input(PackedBatch.of(raw, lane.input_buffer), None, lane._holder)
        layout = li.block_layout()
        assert layout is not None
        places.append({name: at for name, (at, _) in layout[1].items()})
    assert {name for name in places[0] if places[0][name] != places[1][name]} == {"headers"}
    first = places[0]
    per_record = [at for name, at in first.items() if name not in ("keys", "values", "headers")]
    assert max(per_record) < first["keys"] < first["values"] < first["headers"]


def test_a_block_layout_refuses_columns_outside_the_block_or_off_alignment() -> None:
    """A column elsewhere, or an int64 column at an odd offset, means one copy per column instead."""
    lane = WIDE_PAIR[0].packed
    raw = synth.batch(synth.bodies(10))
    li = _lane_input(PackedBatch.of(raw, lane.input_buffer), None, lane._holder)
    assert li.block_layout() is not None
    li.offsets = li.offsets.copy()
    assert li.block_layout() is None
    li = _lane_input(PackedBatch.of(raw, lane.input_buffer), None, lane._holder)
    assert li.block is not None
    li.offsets = li.block[1 : 1 + li.offsets.nbytes].view(np.int64)  # inside the block, one byte off
    assert li.block_layout() is None


@pytest.mark.parametrize("schema", sorted(CONTENT_SCHEMAS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raws=st.lists(batches(), min_size=1, max_size=3), in_place=st.booleans())
def test_packed_stream_of_generated_batches(schema: str, raws: list[RawBatch], in_place: bool) -> None:
    _run_packed(LANES[schema], NATIVE[schema], raws, in_place=in_place)


def test_packed_stream_of_the_shared_vectors() -> None:
    lane = LaneTransform(WIDE, CpuExecutor)
    assert _run_packed(lane, NativeBackend(WIDE), [batch_of(load_vectors())] * 3) > 0


def test_synthetic_bodies_are_all_taken() -> None:
    """Good rows and upstream error bodies (their dead letters) alike."""
    batch = synth.batch(synth.bodies(3000))
    taken, good = _run(LaneTransform(WIDE, CpuExecutor), NativeBackend(WIDE), batch)
    errors = sum(b.startswith(b'{"error"') for b in batch.values)
    assert errors > 0
    assert good == 3000 - errors
    assert taken == 3000


def test_a_batch_below_the_device_minimum_is_the_native_cores_alone() -> None:
    """``gpu_min_batch``: a small batch skips the device passes, a batch at the minimum takes them."""
    lane = LaneTransform(replace(WIDE, gpu_min_batch=500), CpuExecutor)
    small, at_minimum = synth.batch(synth.bodies(499)), synth.batch(synth.bodies(500))
    assert _run(lane, NativeBackend(WIDE), small)[0] == 0
    assert lane.rows == 499
    assert _run(lane, NativeBackend(WIDE), at_minimum)[0] == 500
    assert lane.parse_on_device(small).encoded.buf == NativeBackend(WIDE).parse(small).encoded.buf
    assert lane.taken_rows == 999


def _chat(content: str, **extra: Any) -> bytes:
    """A chat completion in the lane's subset whose first choice says ``content``."""
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {"id": "c", "object": "chat.completion", "created": 1700000000, "model": "m", "choices": [choice], **extra}
    return json.dumps(body, ensure_ascii=False).encode()


# Error bodies the lane finds itself (semantics §1 check 4): flat, nested, a proxy's string, with
# members a good row could not have, with escapes and nesting in their values.
ERROR_BODIES = [
    b'{"error": {"message": "overloaded", "code": 503}}',
    b'{"object": "error", "message": "bad", "type": "BadRequestError", "param": null, "code": 400}',
    b'{"error": "upstream timed out"}',
    b' {"created": "yesterday", "error": {"code": 500}, "choices": 1}\n',
    b'{"id": 5, "object": "error"}',
    b'{"error": {"message": "a\\nb \\"q\\""}, "x": [1, 2.5e3, true, null, {"y": []}]}',
    b'{"error": false}',
    b'{"error": {"message": "\\u00e9 \\ud83d\\ude00"}}',
    # tool arguments read (and rewritten in the decoded copy) before the error key: the body is intact
    b'{"choices": [{"message": {"tool_calls": [{"function": {"name": "f", "arguments": "{\\"a\\": 1}"}}]}}],'
    b' "error": {"code": 500}}',
]
# Bodies that look like error bodies but are not JSON or not an object: the lane's dead letters too.
NOT_ERROR_BODIES = [b'{"error": {"message": "overloaded"}', b'["error"]', b'{"error": {"m": 1}} x']
# Bodies that look like error bodies but are something else, or that the lane leaves to the native
# core (repeated keys).
NOT_THE_LANES_ERRORS = [
    b'{"error": 1, "error": null}',
    b'{"object": "error", "object": "chat.completion"}',
    b'{"object": "errors"}',
    b'{"object": "error ", "error": null}',
]


def test_upstream_error_bodies_are_the_lanes_dead_letters() -> None:
    good = _chat("hello", error=None)
    values = [*ERROR_BODIES, good, *NOT_ERROR_BODIES, *NOT_THE_LANES_ERRORS]
    taken, rows = _run(LaneTransform(WIDE, CpuExecutor), NativeBackend(WIDE), synth.batch(values))
    assert rows == 1
    assert taken == len(ERROR_BODIES) + 1 + len(NOT_ERROR_BODIES)
    result = NativeBackend(WIDE).parse(synth.batch(values))
    reasons = [bad.reason.value for bad in result.bad]
    assert reasons[: len(ERROR_BODIES)] == ["upstream_error"] * len(ERROR_BODIES)
    assert reasons[len(ERROR_BODIES) : len(ERROR_BODIES) + 3] == ["invalid_json", "not_an_object", "invalid_json"]


def test_upstream_error_bodies_in_a_packed_stream() -> None:
    values = [*ERROR_BODIES, _chat("hello"), *NOT_ERROR_BODIES, *NOT_THE_LANES_ERRORS, *synth.bodies(40)]
    raws = [synth.batch(values[:9]), synth.batch(values[9:], first_offset=9)]
    lane = LaneTransform(WIDE, CpuExecutor)
    taken = _run_packed(lane, NativeBackend(WIDE), raws)
    assert taken == len(values) - len(NOT_THE_LANES_ERRORS)


@pytest.mark.parametrize("overlap", [True, False])
def test_the_rows_left_to_the_native_core_are_timed_on_its_thread(overlap: bool) -> None:
    """The native core's rows run on a native thread: its time is counted, and this thread's wait apart."""
    values = [*NOT_THE_LANES_ERRORS, _chat("hello"), *synth.bodies(40)]
    lane = LaneTransform(WIDE, CpuExecutor)
    lane.clock.reset()
    raws = [synth.batch(values[:20]), synth.batch(values[20:], first_offset=20)]
    taken = _run_packed(lane, NativeBackend(WIDE), raws, overlap)
    assert taken == len(values) - len(NOT_THE_LANES_ERRORS)
    assert lane.clock.seconds["lane_rest_native"] > 0
    assert "lane_wait_rest" in lane.clock.seconds


# A closed schema whose ``required`` is not in property order: ``missing`` follows ``required``'s.
OUT_OF_ORDER = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 10},
        "b": {"type": "string", "enum": ["x", "y"]},
        "c": {"type": "array", "items": {"type": "number"}},
        "d": {"type": "boolean"},
        "e": {"type": "number", "minimum": -0.5, "maximum": 0.5},
    },
    "required": ["c", "a", "b"],
    "additionalProperties": False,
}
# Content each check of semantics §4 rejects, alone and together (the first violation named).
INVALID_CONTENT = {
    "[1, 2]": "not_an_object",
    " [ ] ": "not_an_object",
    '```json\n[{"a": 1}]\n```': "not_an_object",
    '{"a": 1}': "missing:c",
    '{"b": "x", "c": [1]}': "missing:a",
    '{"z": 1, "c": "no", "a": 99}': "missing:b",
    '{"c": [1], "a": 1, "b": "x", "z": 1}': "additional:z",
    '{"y": {"deep": [1, {"k": "v\\n"}]}, "c": "no", "a": 1, "b": "x", "z": 1}': "additional:y",
    '{"c": [1, "x", 2], "a": 1, "b": "x"}': "items:c",
    '{"c": 1, "a": 1, "b": "x"}': "type:c",
    '{"c": [], "a": -1, "b": "x"}': "minimum:a",
    '{"c": [0.5], "a": 11, "b": "x"}': "maximum:a",
    '{"c": [1], "a": 1, "b": "z"}': "enum:b",
    '{"c": [1], "a": null, "b": "x"}': "type:a",
    '{"c": [1], "a": "1", "b": "x"}': "type:a",
    '{"c": [1], "a": 1, "b": 2}': "type:b",
    '{"c": [1], "a": 1, "b": "x", "d": null}': "type:d",
    '{"c": [1], "a": 1, "b": "x", "d": 1}': "type:d",
    '{"c": [1], "a": 1, "b": "x", "d": [true]}': "type:d",
    '{"c": [1], "a": 1, "b": "x", "e": 0.75}': "maximum:e",
    '{"c": [1], "a": 1, "b": "x", "e": -1}': "minimum:e",
    '{"e": "no", "d": true, "b": "z", "a": 99, "c": [1]}': "maximum:a",
    '```\n{"c": [true], "a": 1, "b": "x"}\n```': "items:c",
    '{"c": [1], "a": 1, "b": "x"': "invalid_json",
    '{"c": [1], "a": 1, "b": "\\u0041",}': "invalid_json",
    '["\\u0041"]': "not_an_object",
    '{"c": [1], "a": 1, "\\u0062": "x", "z\\u00e9\\"": 1}': 'additional:zé"',  # escaped keys, decoded
}
VALID_CONTENT = ['{"c": [1, 2.5], "a": 10, "b": "y", "d": false, "e": 0.5}', '{"b": "x", "a": 0, "c": []}']
# Content the lane leaves to the native core: a double for an integer, a repeated key.
LEFT_CONTENT = ['{"c": [1], "a": 1.5, "b": "x"}', '{"c": [1], "a": 1, "b": "x", "a": 2}']


def test_invalid_content_is_taken_with_the_first_violation_as_its_error() -> None:
    settings = TransformSettings(record=TypedRecord(OUT_OF_ORDER), max_record_bytes=1 << 16)
    native = NativeBackend(settings)
    contents = [*INVALID_CONTENT, *VALID_CONTENT, *LEFT_CONTENT]
    batch = synth.batch([_chat(c) for c in contents])
    taken, rows = _run(LaneTransform(settings, CpuExecutor), native, batch)
    assert rows == len(contents)
    assert taken == len(contents) - len(LEFT_CONTENT)
    schema = fastavro.parse_schema(settings.record.avro)
    encoded = native.parse(batch).encoded
    errors = [_row(encoded, k, schema)["content_error"] for k in range(len(INVALID_CONTENT))]
    assert errors == list(INVALID_CONTENT.values())


def test_the_default_schemas_invalid_content_is_taken() -> None:
    contents = [
        '```json\n{"sentiment": "neutral", "score": 1.5, "risk_level": "low"}\n```',
        '{"sentiment": "happy", "score": 0.5, "risk_level": "low"}',
        '{"sentiment": "neutral", "score": 0.5, "risk_level": "low", "confidence": 0.9}',
        '[{"sentiment": "neutral"}]',
        '{"score": 0.5}',
    ]
    taken, rows = _run(LANES["default"], NATIVE["default"], synth.batch([_chat(c) for c in contents]))
    assert taken == rows == len(contents)


def _row(encoded: Any, k: int, schema: Any) -> dict[str, Any]:
    datum = bytes(encoded.buf[encoded.offsets[k] : encoded.offsets[k + 1]])
    return fastavro.schemaless_reader(io.BytesIO(datum), schema)  # type: ignore[no-any-return]


# The dead letters the lane can write itself (their texts are constants).
LANE_REASONS = {"upstream_error", "invalid_json", "invalid_utf8", "not_an_object"}


def test_shared_vectors() -> None:
    batch = batch_of(load_vectors())
    taken, good = _run(LaneTransform(WIDE, CpuExecutor), NativeBackend(WIDE), batch)
    bad = NativeBackend(WIDE).parse(batch).bad
    constant = sum(d.reason.value in LANE_REASONS and "nesting" not in d.error for d in bad)
    assert good > 0 and constant > 0
    assert good < taken <= good + constant


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus folder {CORPUS} is absent")
def test_real_corpus() -> None:
    values = [p.read_bytes() for p in sorted(CORPUS.glob("*.json"))]
    compact = [json.dumps(json.loads(v), separators=(",", ":")).encode() for v in values]
    taken, good = _run(LaneTransform(WIDE, CpuExecutor), NativeBackend(WIDE), RawBatch.of_values(values + compact))
    assert taken >= good * 3 // 4


@pytest.mark.parametrize("schema", sorted(CONTENT_SCHEMAS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=batches())
def test_generated_batches(schema: str, batch: RawBatch) -> None:
    _run(LANES[schema], NATIVE[schema], batch)


TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24)
NUMBERS = st.one_of(
    st.integers(-(2**60), 2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False, places=4).map(float),
    st.sampled_from([0.1, 0.5, 1e-7, 123456789.125, -0.0, 1e22, 1e23, 5e-324, 2.2250738585072014e-308]),
)


@st.composite
def lane_bodies(draw: st.DrawFn) -> bytes:
    """Bodies in the common shape (what the lane takes), with strings, numbers and spacing varied."""
    content_object = {
        "sentiment": draw(st.sampled_from(["positive", "neutral", "negative", "other"])),
        "score": draw(st.floats(0, 1) | st.integers(0, 1) | NUMBERS),
        "risk_level": draw(st.sampled_from(["low", "medium", "high"])),
        # wrong types among them: the lane names the first violation as the native core does
        "topics": draw(st.lists(TEXT, max_size=3) | st.lists(st.integers(0, 9) | TEXT, max_size=2) | TEXT),
        "needs_review": draw(st.booleans() | st.none() | st.integers(0, 1)),
    }
    for key in draw(st.sets(st.sampled_from(list(content_object)), max_size=2)):
        del content_object[key]
    if draw(st.booleans()):
        content_object[draw(st.sampled_from(["confidence", "Score"]))] = draw(NUMBERS | TEXT)
    shaped: Any = draw(st.sampled_from([content_object, [content_object], []]))
    text = json.dumps(shaped, ensure_ascii=False, indent=draw(st.sampled_from([None, 2])))
    content = draw(st.sampled_from([text, f"```json\n{text}\n```", f"  {text}\n", "```\n" + text]) | TEXT)
    message: dict[str, Any] = {"role": "assistant", "content": draw(st.just(content) | st.none() | TEXT)}
    if draw(st.booleans()):
        arguments = {draw(TEXT): draw(st.integers(-5, 10**12) | TEXT | st.booleans() | st.none()) for _ in range(2)}
        raw_arguments = json.dumps(arguments, ensure_ascii=False, indent=draw(st.sampled_from([None, 1])))
        call = {"id": "c1", "type": "function", "function": {"name": draw(TEXT), "arguments": raw_arguments}}
        message["tool_calls"] = [call] * draw(st.integers(1, 2))
    if draw(st.booleans()):
        message[draw(st.sampled_from(["reasoning", "reasoning_content"]))] = draw(TEXT | st.none())
    body = {
        "id": draw(TEXT),
        "object": draw(st.sampled_from(["chat.completion", "chat.completion.chunk", "text_completion"])),
        "created": draw(st.integers(0, 2**40)),
        "model": draw(TEXT),
        "choices": [
            {
                "index": draw(st.integers(0, 3)),
                draw(st.sampled_from(["message", "delta"])): message,
                "logprobs": draw(st.none() | st.just({"content": [{"token": "a", "logprob": -0.12345678901234567}]})),
                "finish_reason": draw(st.sampled_from(["stop", "length", None])),
                "stop_reason": draw(st.none() | st.integers(0, 10**6) | TEXT),
            }
        ],
        "usage": {
            "prompt_tokens": draw(st.integers(0, 10**9)),
            "completion_tokens": 3,
            "total_tokens": 9,
            "prompt_tokens_details": draw(st.none() | st.just({"cached_tokens": 4})),
        },
        "system_fingerprint": draw(st.none() | TEXT),
        "prompt_logprobs": None,
        "kv_transfer_params": None,
    }
    return json.dumps(body, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 1]))).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(lane_bodies(), min_size=1, max_size=8))
def test_bodies_in_the_lanes_subset(values: list[bytes]) -> None:
    _run(LANES["default"], NATIVE["default"], synth.batch(values))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(lane_bodies(), min_size=1, max_size=8), split=st.integers(0, 8))
def test_packed_bodies_in_the_lanes_subset(values: list[bytes], split: int) -> None:
    raws = [synth.batch(values[:split]), synth.batch(values[split:], first_offset=split)]
    _run_packed(LANES["default"], NATIVE["default"], raws)


PLAIN = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)
KEY_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"), exclude_characters='"\\'))


def _attributes_json(attributes: dict[str, str], separators: tuple[str, str], escaped: bool) -> str:
    """Attributes as a header's JSON: values in raw UTF-8, or ``\\u``-escaped under ASCII keys."""
    if escaped:
        attributes = {key.encode("ascii", "ignore").decode(): value for key, value in attributes.items()}
    return json.dumps(attributes, ensure_ascii=escaped, separators=separators)


TAKEN_ATTRIBUTES = st.one_of(
    st.none(),
    st.dictionaries(KEY_TEXT, PLAIN, max_size=4).flatmap(
        lambda d: st.tuples(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " :")]), st.booleans()).map(
            lambda spelling: (" " + _attributes_json(d, *spelling) + "\n").encode()
        )
    ),
    st.sampled_from([b"", b"[1]", b'"x"', b"null", b"1.5", b"not json", b"\xff{", b" [}"]),
)
LATENCIES = [b"12", b"0012", b"", b"1.5", b"123456789012345678", b"1234567890123456789"]
TAKEN_LATENCY = st.none() | st.sampled_from(LATENCIES)


@st.composite
def record_columns(draw: st.DrawFn) -> tuple[bytes | None, list[tuple[str, bytes | None]]]:
    """A key and headers whose columns the lane reads itself (every header order, repeats included)."""
    key = draw(st.none() | PLAIN.map(str.encode))
    names = st.sampled_from(["latency.ms", "attributes", "http.status"])
    values = {"latency.ms": TAKEN_LATENCY, "attributes": TAKEN_ATTRIBUTES, "http.status": st.none() | st.just(b"200")}
    headers = draw(st.lists(names.flatmap(lambda n: values[n].map(lambda v: (n, v))), max_size=4))
    return key, headers


def _with_columns(values: list[bytes], columns: list[tuple[bytes | None, list[tuple[str, bytes | None]]]]) -> RawBatch:
    base = synth.batch(values)
    return RawBatch(
        values=values,
        keys=[key for key, _ in columns],
        headers=[headers for _, headers in columns],
        topic=base.topic,
        partitions=base.partitions,
        offsets=base.offsets,
        timestamps_ms=base.timestamps_ms,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(columns=st.lists(record_columns(), min_size=1, max_size=8), in_place=st.booleans())
def test_the_lane_reads_keys_latency_and_attributes_itself(
    columns: list[tuple[bytes | None, list[tuple[str, bytes | None]]]], in_place: bool
) -> None:
    """Flat string attributes (spacing, non-ASCII), null and non-object ones, any latency: every row taken."""
    values = [v for v in synth.bodies(40) if not v.startswith(b'{"error"')][: len(columns)]
    raw = _with_columns(values, columns)
    lane, native = WIDE_PAIR
    assert _run(lane, native, raw) == (len(values), len(values))
    assert _run_packed(lane, native, [raw], in_place=in_place) == len(values)


LEFT_TO_NATIVE = [
    (b"k", [("attributes", b'{"arm":"a","n":1}')]),  # a value that is not a string
    (b"k", [("attributes", b'{"arm":"a","arm":"b"}')]),  # a repeated key
    (b"k", [("attributes", b'{"a\\"m":"x"}')]),  # an escaped key
    (b"k", [("attributes", b'{"arm":"a"} x')]),  # text after the object: not JSON
    (b"k", [("attributes", b'{"arm":{"x":"y"}}')]),  # nested
    (b"\xff\xfe", [("latency.ms", b"5")]),  # a key that is not UTF-8 (the native core replaces it)
]


def test_record_columns_outside_the_lanes_subset_go_to_the_native_core() -> None:
    values = [v for v in synth.bodies(40) if not v.startswith(b'{"error"')][: len(LEFT_TO_NATIVE) + 1]
    columns = [*LEFT_TO_NATIVE, (b"k", [("attributes", b'{"arm":"a"}')])]
    raw = _with_columns(values, columns)
    lane, native = WIDE_PAIR
    assert _run(lane, native, raw) == (1, len(values))
    assert _run_packed(lane, native, [raw]) == 1


def test_cut_headers_are_refused_by_both() -> None:
    """A packed header cut short is refused (a fetch that packed it wrong), by the lane as by the native core."""
    batch = PackedBatch.of(synth.batch(synth.bodies(3)))
    ends = batch.header_ends.copy()
    cut = replace(batch, header_ends=ends - np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="malformed"):
        WIDE_PAIR[1].run_packed(cut, np.arange(3))
    with pytest.raises(ValueError, match="malformed"):
        list(WIDE_PAIR[0].packed.stream([cut]))


@settings(max_examples=500, deadline=None)
@given(x=NUMBERS, spelling=st.sampled_from(["repr", "e", "fixed"]))
def test_numbers_the_lane_takes_are_correctly_rounded(x: float, spelling: str) -> None:
    fns = compile_lane("cpu", WIDE.kernel_cache)
    text = {"repr": repr(float(x)), "e": f"{float(x):.6e}", "fixed": f"{float(x):.5f}"}[spelling]
    raw = np.frombuffer(text.encode(), dtype=np.uint8)
    end, kind, ivalue, dvalue = fns.scan_number(raw, 0, len(raw))
    assert end == len(raw)
    if kind == 2:
        assert struct.pack("<d", dvalue) == struct.pack("<d", float(text))
        assert fns.double_bits(dvalue) == struct.unpack("<q", struct.pack("<d", float(text)))[0]
    elif kind == 1:
        assert ivalue == int(text)
    elif kind == 0:
        assert math.isfinite(float(text))
    else:  # not taken: only where the value might not be a finite double
        assert kind == -1 and abs(float(text)) >= 1e290


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(alphabet='[]{}",:0123456789.eE-+ truefalsn\\u', max_size=20)
    | st.builds(
        json.dumps,
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=4),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        ),
    )
)
def test_skipped_values_are_json(text: str) -> None:
    """Whatever the lane's strict skipper accepts, Python's strict parser accepts too."""
    fns = compile_lane("cpu", WIDE.kernel_cache)
    raw = np.frombuffer(text.encode() or b" ", dtype=np.uint8)
    end = fns.skip_value(raw, raw[:0], 0, len(text.encode()), True)
    if end >= 0 and fns.skip_ws(raw, end, len(text.encode())) == len(text.encode()):
        json.loads(text, parse_constant=lambda c: pytest.fail(f"accepted {c}"))


def test_a_schema_with_another_layout_is_refused() -> None:
    record = TypedRecord.from_file()
    moved = TypedRecord(record.content_schema)
    moved.__dict__["avro"] = dict(record.avro, fields=list(reversed(record.avro["fields"])))
    with pytest.raises(ConfigError, match="record layout"):
        LaneTransform(TransformSettings(record=moved), CpuExecutor)


def test_cpu_lane_backend_times_the_host_stages_of_what_it_parses() -> None:
    from gpu_stage.transform.device.lane import CpuLaneBackend

    backend = CpuLaneBackend(TransformSettings())
    raw = synth.batch(synth.bodies(300))
    backend.parse(raw)
    assert set(backend.clock.seconds) == {"lane_pack", "lane_rest_native", "lane_merge"}
    backend.reset_counters()
    assert backend.clock.seconds == {}
    _assert_same(backend.parse(raw), NativeBackend(TransformSettings()).parse(raw))
    assert backend.name == "lane-cpu"


def test_a_stream_whose_results_are_let_go_reuses_two_output_buffers() -> None:
    """Batch k+1's pass 2 is queued, into an output buffer of its own, before batch k is yielded.

    So a stream holds two pooled output buffers, and no more when its results are let go: the pool
    allocates two for six batches. The CUDA tier checks the same through the GPU backend.
    """
    lane, native = LaneTransform(TransformSettings(), CpuExecutor), NativeBackend(TransformSettings())
    pool = lane.packed.pool
    made: list[int] = []
    allocate = pool._allocate
    pool._allocate = lambda size: (made.append(size), allocate(size))[1]  # type: ignore[method-assign]
    values = synth.bodies(60_000)  # batches of 10 k: each fits a buffer the pool made for an earlier one
    raws = [synth.batch(values[i : i + 10_000], first_offset=i) for i in range(0, 60_000, 10_000)]
    wanted = iter([native.parse(raw).encoded.buf for raw in raws])
    # Not zip(raws, stream): zip keeps its last tuple, and with it the last result, for reuse.
    for result in lane.packed.stream(PackedBatch.of(raw) for raw in raws):
        assert bytes(result.encoded.buf) == next(wanted)
        del result
    assert len(made) == 2
