"""GPU tier: the device lane on CUDA against the native core, on generated batches (skipped without a GPU).

The same strategies as the CPU compilation of the lane (``tests/unit/gpu_stage/test_gpu_stage_lane.py``),
now through the CUDA kernels: same bytes, same dead letters, and the lane takes every good synthetic row.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_stage import synth
from gpu_stage.backends.base import TransformSettings
from gpu_stage.backends.native import NativeBackend
from gpu_stage.batch import RawBatch
from tests.gpu.gpu_parity import REASON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"no usable GPU: {REASON}")]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "gpu_stage"))
pytest.importorskip("numba")

from test_gpu_stage_lane import _run, batches, lane_bodies  # noqa: E402


@pytest.fixture(scope="module")
def lane() -> Any:
    from gpu_stage.backends.gpu_lane import CudaExecutor
    from gpu_stage.backends.lane import LaneTransform

    return LaneTransform(TransformSettings(), CudaExecutor)


NATIVE = NativeBackend(TransformSettings())


def test_synthetic_batches_are_taken_whole(lane: Any) -> None:
    for size in (1, 1000, 50_000):
        batch = synth.batch(synth.bodies(size), first_offset=size)
        taken, good = _run(lane, NATIVE, batch)
        assert taken == good


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=batches())
def test_generated_batches(lane: Any, batch: RawBatch) -> None:
    _run(lane, NATIVE, batch)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(lane_bodies(), min_size=1, max_size=64))
def test_bodies_in_the_lanes_subset(lane: Any, values: list[bytes]) -> None:
    _run(lane, NATIVE, synth.batch(values))
