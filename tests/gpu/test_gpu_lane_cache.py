"""GPU tier: the device lane's CUDA kernels are kept on disk, and a second process loads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.gpu_parity import REASON
from tests.lane_cache_probe import probe

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"no usable GPU: {REASON}")]


def test_the_second_process_loads_the_kernels_the_first_compiled(tmp_path: Path) -> None:
    first = probe("cuda", tmp_path, bodies=2000)
    assert first["same"] and first["hits"] == 0
    folders = list(tmp_path.glob("lane-cuda-*"))
    assert len(folders) == 1 and any(folders[0].rglob("*.nbi"))
    second = probe("cuda", tmp_path, bodies=2000)
    assert second["same"] and second["hits"] == 2 and second["misses"] == 0
