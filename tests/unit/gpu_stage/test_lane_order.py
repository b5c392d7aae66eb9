"""The device lane's row order (``gpu_stage/transform/device/order.py``), compiled for the CPU.

Threads take rows grouped by body length class so that a warp's bodies end together. The order must
be a permutation of the rows, grouped by class (within each of pass 2's pieces, for pass 2), and it
must change no byte: ``length``, ``balanced``, ``arrival`` and ``warp`` give the native core's output, in one
piece or many.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("numba")

from test_gpu_stage_native import _assert_same
from test_packed import assert_same_result

from bench import corpus
from gpu_stage import synth
from gpu_stage.transform.api import LANE_ORDERS, ORDERED_LANES, TransformSettings
from gpu_stage.transform.batch import RawBatch
from gpu_stage.transform.device.columns import LaneInput
from gpu_stage.transform.device.executor import CpuExecutor, piece_rows, write_pieces
from gpu_stage.transform.device.lane import LaneTransform
from gpu_stage.transform.device.merge import int_columns
from gpu_stage.transform.device.order import CLASSES, WARP, dealt_slot, length_class
from gpu_stage.transform.native import NativeBackend
from gpu_stage.transform.packed import PackedBatch
from llmpipe.errors import ConfigError

WIDE = TransformSettings(max_record_bytes=1 << 20)
LANES = {order: LaneTransform(replace(WIDE, lane_order=order), CpuExecutor) for order in LANE_ORDERS}
NATIVE = NativeBackend(WIDE)


@pytest.fixture(scope="module")
def mixed() -> list[bytes]:
    """The benchmark's generated corpus with its default size mix (400 B to 32 KB, malformed bodies among them)."""
    return corpus.generate(corpus.CorpusConfig(records=1500)).values


def _ends(values: list[bytes]) -> np.ndarray:
    return np.cumsum([len(v) for v in values], dtype=np.int64)


def test_a_length_class_is_a_quarter_octave() -> None:
    assert [length_class(n) for n in (0, 1, 31, 32, 39, 40, 48, 56, 63, 64, 80)] == [0, 0, 0, 0, 0, 1, 2, 3, 3, 4, 5]
    assert (length_class(1023), length_class(1024), length_class(1279), length_class(1280)) == (19, 20, 20, 21)
    assert length_class((1 << 21) - 1) == length_class(1 << 21) == length_class(1 << 40) == CLASSES - 1
    lengths = np.unique(np.geomspace(32, (1 << 21) - 1, 5000).astype(np.int64))
    classes = np.array([length_class(int(n)) for n in lengths])
    assert (np.diff(classes) >= 0).all() and (np.diff(classes) <= 1).all()  # monotonic, no class skipped
    for c in range(CLASSES - 1):  # a class's bodies differ by at most a quarter of its shortest
        members = lengths[classes == c]
        assert members.max() < members.min() * 1.25 + 1


def test_the_compiled_class_is_the_plain_one() -> None:
    fns = LANES["length"].executor.fns
    for n in (*range(0, 300), 1023, 1024, 5000, 20_000, 1 << 20, (1 << 21) - 1, 1 << 21, 1 << 33):
        assert fns.length_class(n) == length_class(n)


def test_pass_1_order_is_a_permutation_grouped_by_length_class(mixed: list[bytes]) -> None:
    ends = _ends(mixed)
    classes, order = LANES["length"].executor.row_order(ends)
    lengths = np.diff(ends, prepend=0)
    assert classes.tolist() == [length_class(int(n)) for n in lengths]
    assert sorted(order.tolist()) == list(range(len(mixed)))
    assert (np.diff(classes[order].astype(np.int64)) >= 0).all()
    assert len(np.unique(classes)) >= 10  # the mix does span many classes
    # Warps of like lengths: a warp's longest body is near its mean, far less so in arrival order.
    by_warp = lengths[order][: len(order) // 32 * 32].reshape(-1, 32)
    in_arrival = lengths[: len(order) // 32 * 32].reshape(-1, 32)
    assert by_warp.max(axis=1).sum() < 0.5 * in_arrival.max(axis=1).sum()


def test_arrival_makes_no_order_and_length_keeps_it_for_pass_2() -> None:
    """``arrival`` runs the kernels whose thread ``t`` takes row ``t``; ``length`` and ``balanced`` the ordered ones."""
    batch = synth.batch(synth.bodies(64))
    for order, lane in LANES.items():
        li = LaneInput.of(lane.native._core, batch, lane.executor.staging, int_columns(batch))
        handle = lane.executor.submit(li, len(batch), 0)
        assert (handle.order is None, handle.classes is None) == (order not in ORDERED_LANES,) * 2
        if order in ORDERED_LANES:
            assert sorted(handle.order.tolist()) == list(range(64))


@pytest.mark.parametrize("m", [0, 1, 31, 32, 33, 63, 64, 65, 1000, 4096])
def test_dealing_is_a_permutation_that_spreads_every_stretch_of_ranks(m: int) -> None:
    slots = [dealt_slot(i, m) for i in range(m)]
    assert sorted(slots) == list(range(m))
    full = m // WARP
    rest = m - full * WARP
    assert slots[:rest] == list(range(full * WARP, m))  # the shortest fill the partial warp
    for w in range(full):  # warp w holds one rank of each stretch of `full` like ranks, forth and back
        ranks = sorted(i - rest for i in range(rest, m) if slots[i] // WARP == w)
        assert [r // full for r in ranks] == list(range(WARP))
        assert [r % full for r in ranks] == [w if t % 2 == 0 else full - 1 - w for t in range(WARP)]
    assert [LANES["balanced"].executor.fns.dealt_slot(i, m) for i in range(m)] == slots


def test_balanced_warps_hold_about_the_same_bytes(mixed: list[bytes]) -> None:
    """Dealt, the heaviest warp holds far fewer bytes than by ``length`` or in ``arrival``; a permutation still."""
    ends = _ends(mixed)
    lengths = np.diff(ends, prepend=0)
    n = len(mixed) // WARP * WARP  # the full warps (the partial one holds the shortest rows)
    heaviest = {}
    for name in ("arrival", "length", "balanced"):
        classes, order = LANES[name].executor.row_order(ends) if name != "arrival" else (None, np.arange(len(mixed)))
        assert sorted(order.tolist()) == list(range(len(mixed)))
        if name == "balanced":  # the partial warp holds the shortest classes
            assert classes[order[n:]].max() <= classes[order[:n]].min()
        heaviest[name] = lengths[order][:n].reshape(-1, WARP).sum(axis=1)
    # On this mix: heaviest warp 89 KB balanced (mean 68 KB), 126 KB in arrival order, 280 KB by length.
    assert heaviest["balanced"].max() < 0.75 * heaviest["arrival"].max()
    assert heaviest["balanced"].max() < 0.4 * heaviest["length"].max()
    assert heaviest["balanced"].max() < 1.4 * heaviest["balanced"].mean() < heaviest["arrival"].max()


@pytest.mark.parametrize("name", ORDERED_LANES)
def test_pass_2_order_sorts_each_piece_in_its_own_span(mixed: list[bytes], name: str) -> None:
    executor = LANES[name].executor
    classes, order = executor.row_order(_ends(mixed))
    n = len(mixed)
    bounds = np.array([0, 1, 400, 401, 1100, n], dtype=np.int64)
    executor.piece_order(classes, bounds, order)
    for lo, hi in itertools.pairwise(bounds.tolist()):
        span = order[lo:hi]
        assert sorted(span.tolist()) == list(range(lo, hi))
        if name == "balanced":  # sorted, then dealt within the span
            slots = [dealt_slot(i, hi - lo) for i in range(hi - lo)]
            span = span[slots]
        assert (np.diff(classes[span].astype(np.int64)) >= 0).all()
    # Used twice: the counts the first sort left are zero again.
    executor.piece_order(classes, bounds, order)
    assert sorted(order.tolist()) == list(range(n))


def test_a_pieces_rows_start_at_the_row_whose_datum_starts_it() -> None:
    # Rows 1 and 4 have no datum (dead letters); the others 10 bytes each.
    rows = np.array([0, 2, 3, 5], dtype=np.int64)
    offsets = np.array([0, 10, 20, 30, 40], dtype=np.int64)
    pieces = write_pieces(offsets, 15)
    assert pieces == [(0, 20), (20, 40)]
    assert piece_rows(pieces, offsets, rows, 6).tolist() == [0, 3, 6]
    assert piece_rows([(0, 40)], offsets, rows, 6).tolist() == [0, 6]
    assert piece_rows(pieces, offsets, None, 6) is None


@pytest.mark.parametrize("piece_bytes", [0, 64 << 10, 1])
def test_either_order_gives_the_native_cores_bytes(mixed: list[bytes], piece_bytes: int) -> None:
    """In one piece, in pieces of 64 KiB, and a piece per row: same rows, bytes and dead letters."""
    batch = synth.batch(mixed, first_offset=3)
    want = NATIVE.parse(batch)
    sizes = {}
    for order, lane in LANES.items():
        lane.executor.write_piece_bytes = piece_bytes
        before = lane.taken_rows
        try:
            _assert_same(want, lane.parse(batch))
        finally:
            lane.executor.write_piece_bytes = 0
        assert lane.taken_rows - before > 0.9 * len(batch)
        sizes[order] = lane.measure(batch).tolist()
    assert sizes["length"] == sizes["balanced"] == sizes["arrival"] == sizes["warp"]


@pytest.mark.parametrize("order", LANE_ORDERS)
def test_packed_batches_in_pieces_give_the_native_cores_bytes(mixed: list[bytes], order: str) -> None:
    """The stream path passes the good rows to pass 2, whose pieces then take their own rows only."""
    lane = LANES[order]
    raws = [synth.batch(mixed[a:b], first_offset=a) for a, b in ((0, 700), (700, 701), (701, len(mixed)))]
    lane.executor.write_piece_bytes = 32 << 10
    try:
        results = list(lane.packed.stream([PackedBatch.of(raw, lane.packed.input_buffer) for raw in raws]))
    finally:
        lane.executor.write_piece_bytes = 0
    for raw, got in zip(raws, results, strict=True):
        assert_same_result(NATIVE.parse(raw), got)


def test_a_batch_of_one_length_and_of_empty_bodies() -> None:
    for values in ([b"{}"] * 40, [b""] * 3, synth.bodies(100)):
        batch = RawBatch.of_values(values)
        for lane in LANES.values():
            _assert_same(NATIVE.parse(batch), lane.parse(batch))


def test_the_lane_order_setting_reaches_the_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--lane-order`` / ``GPU_STAGE_LANE_ORDER``: balanced by default; a value not known is one line naming both."""
    from gpu_stage.settings import parse

    assert parse([])[1].lane_order == TransformSettings().lane_order == "balanced"
    assert parse(["--lane-order", "length"])[1].lane_order == "length"
    monkeypatch.setenv("GPU_STAGE_LANE_ORDER", "length")
    assert parse([])[1].lane_order == "length"
    monkeypatch.setenv("GPU_STAGE_LANE_ORDER", "shortest")
    with pytest.raises(ConfigError) as refused:
        parse([])
    must = "GPU_STAGE_LANE_ORDER (--lane-order) must be one of arrival, length, balanced, warp, not 'shortest'"
    assert str(refused.value) == must
    assert LANES["arrival"].executor.lane_order == "arrival"
    assert LANES["length"].executor.lane_order == "length"
    assert parse(["--lane-order", "arrival"])[1].lane_order == "arrival"
    assert parse(["--lane-order", "warp"])[1].lane_order == LANES["warp"].executor.lane_order == "warp"


def test_the_benchmark_runs_the_orders_asked_for() -> None:
    from bench.__main__ import _as_order, parser

    assert parser().parse_args([]).lane_orders == ["balanced"]
    assert parser().parse_args(["--lane-orders", "arrival,length"]).lane_orders == ["arrival", "length"]
    with pytest.raises(SystemExit):
        parser().parse_args(["--lane-orders", "length,shortest"])
    entry = {"engine": "gpu_stage-gpu-packed", "records_per_s": 1.0}
    assert _as_order(entry, "length")["engine"] == "gpu_stage-gpu-packed-length"
    assert _as_order(entry, "arrival")["engine"] == "gpu_stage-gpu-packed-arrival"
    assert _as_order(entry, "balanced") == entry | {"lane_order": "balanced"}
    assert _as_order(entry, None) == entry
