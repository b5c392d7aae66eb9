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
    folders = sorted(tmp_path.glob("lane-cuda-*"))
    builds = [f.name.rsplit("-", 1)[0] for f in folders]  # the strings pass is the warp build's
    assert builds == ["lane-cuda", "lane-cuda-warp"] and all(any(f.rglob("*.nbi")) for f in folders)
    second = probe("cuda", tmp_path, bodies=2000)
    assert second["same"] and second["hits"] == 3 and second["misses"] == 0  # the strings pass and both passes
