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


def test_the_worker_parse_thread_gives_the_same_bytes() -> None:
    """The worker parses chunks on a thread of its own: the backend built on this thread must work there."""
    from concurrent import futures

    from gpu_stage.backends.gpu import GpuBackend

    backend = GpuBackend(TransformSettings())
    batch = synth.batch(synth.bodies(20_000))
    here = backend.parse(batch)
    with futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="parse") as pool:
        there = [pool.submit(backend.parse, batch.slice(start, end)).result() for start, end in batch.chunks(7_000)]
    assert b"".join(bytes(r.encoded.buf) for r in there) == bytes(here.encoded.buf)
    assert [b.offset for r in there for b in r.bad] == [b.offset for b in here.bad]
    assert backend.lane is not None and backend.lane.taken_rows > 0
