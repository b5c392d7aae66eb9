"""The device lane's compiled code is kept on disk: a second process loads it instead of compiling."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lane_cache_probe import probe

pytest.importorskip("numba")


def test_the_second_process_loads_the_kernels_the_first_compiled(tmp_path: Path) -> None:
    first = probe("cpu", tmp_path)
    assert first["same"] and first["hits"] == 0 and first["misses"] == 3  # the strings pass and both passes
    folders = sorted(tmp_path.glob("lane-cpu-*"))
    builds = [f.name.rsplit("-", 1)[0] for f in folders]  # the strings pass is the warp build's
    assert builds == ["lane-cpu", "lane-cpu-warp"] and all(any(f.rglob("*.nbi")) for f in folders)
    assert str(first["module"]).startswith("gpu_stage.transform.device._compiled_cpu_")

    second = probe("cpu", tmp_path)
    assert second["same"] and second["hits"] == 3 and second["misses"] == 0
    assert sorted(tmp_path.glob("lane-cpu-*")) == folders
