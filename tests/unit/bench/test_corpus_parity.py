"""The benchmark's bodies through the reference, the native core and the device lane (compiled for the CPU).

All three must give the same Avro bytes and the same dead letters on real-shaped bodies and on
bodies full of random escapes, where the lane takes many of the former and must decline what it
cannot read of the latter. The GPU tier runs the same corpora on the device (``tests/gpu``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("numba")

from bench import escape_corpus, real_corpus
from gpu_stage.synth import batch
from gpu_stage.transform import NativeBackend, ReferenceBackend, TransformSettings
from gpu_stage.transform.device import CpuExecutor, LaneTransform
from tests.gpu.gpu_parity import assert_same, first_difference

RECORDS = 3000
SETTINGS = TransformSettings()


@pytest.fixture(scope="module")
def lane() -> LaneTransform:
    return LaneTransform(SETTINGS, CpuExecutor)


def _taken(lane: LaneTransform, values: list[bytes]) -> int:
    """Compare the three on one batch; the rows the lane took."""
    raw = batch(values)
    reference = ReferenceBackend(SETTINGS).parse(raw)
    before = lane.taken_rows
    for other in (NativeBackend(SETTINGS).parse(raw), lane.parse(raw)):
        assert first_difference(reference, other) is None
        assert_same(reference, other)
    return lane.taken_rows - before


def test_real_shaped_bodies(lane: LaneTransform) -> None:
    values = real_corpus.generate(RECORDS, seed=21).values
    assert _taken(lane, values) > RECORDS // 3


def test_random_escape_bodies(lane: LaneTransform) -> None:
    values = escape_corpus.escape_bodies(RECORDS, seed=22).values
    assert _taken(lane, values) > 0
