"""The device lane's register cap (``--lane-registers``): checked at start, carried to the executor,
each cap a build of its own, and applied to pass 1's kernels only.

Runs without a GPU; the CUDA tier (``tests/gpu/test_gpu_lane.py``) checks the capped kernels' registers
and bytes on the device.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.device import kernels
from gpu_stage.transform.device.executor import CpuExecutor
from gpu_stage.transform.device.lane import LaneTransform
from llmpipe.errors import ConfigError


def test_the_register_cap_is_checked_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """96 by default; 0 (the compiler's choice) or 32 to 255 by a flag or its env var; anything else one
    line naming both."""
    from gpu_stage.settings import parse

    assert parse([])[1].lane_registers == TransformSettings().lane_registers == 96
    assert parse(["--lane-registers", "0"])[1].lane_registers == 0
    assert parse(["--lane-registers", "128"])[1].lane_registers == 128
    monkeypatch.setenv("GPU_STAGE_LANE_REGISTERS", "64")
    assert parse([])[1].lane_registers == 64
    for bad in ("16", "256", "many"):
        monkeypatch.setenv("GPU_STAGE_LANE_REGISTERS", bad)
        with pytest.raises(ConfigError) as refused:
            parse([])
        assert str(refused.value).startswith("GPU_STAGE_LANE_REGISTERS (--lane-registers) must be 0 or an integer")
        assert "[32, 255]" in str(refused.value) and bad in str(refused.value)


def test_the_lane_builds_its_executor_with_the_cap() -> None:
    """The cap goes to the executor as it is built (one build of the lane), 0 when none is set."""
    settings = TransformSettings(kernel_cache=None)
    default = LaneTransform(settings, CpuExecutor).executor
    capped = LaneTransform(replace(settings, lane_registers=128), CpuExecutor).executor
    plain = LaneTransform(replace(settings, lane_registers=0), CpuExecutor).executor
    assert (default.registers, capped.registers, plain.registers) == (96, 128, 0)  # type: ignore[attr-defined]


def test_each_cap_is_a_build_of_its_own_for_cuda_only(tmp_path: Path) -> None:
    """The cache folder is keyed by the cap; a cap for a CPU build, or outside 32 to 255, is refused."""
    folders = {r: kernels._cached_namespace("cuda", tmp_path, r)["_cache"] for r in (0, 64, 96)}
    assert len(set(folders.values())) == 3
    assert folders[96] == kernels._cached_namespace("cuda", tmp_path, 96)["_cache"]
    for target, registers in (("cpu", 96), ("cuda-warp", 96), ("cuda", 16), ("cuda", 256)):
        with pytest.raises(ConfigError, match="register cap"):
            kernels.compile_lane(target, None, registers)


def test_a_cap_goes_to_pass_1s_kernels_only() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    class Cuda:
        """numba.cuda's ``jit`` as the decorator uses it: keyword options, then the function."""

        @staticmethod
        def jit(**options: Any) -> Any:
            return lambda fn: calls.append((fn.__name__, options)) or fn

    def measure() -> None: ...
    def measure_ordered() -> None: ...
    def write() -> None: ...

    decorate = kernels._kernel_decorator(Cuda, True, dict.fromkeys(kernels.PASS_1_KERNELS, 96), {})
    for fn in (measure, measure_ordered, write):
        decorate(fn)
    assert calls == [
        ("measure", {"cache": True, "max_registers": 96}),
        ("measure_ordered", {"cache": True, "max_registers": 96}),
        ("write", {"cache": True}),
    ]
    calls.clear()
    kernels._kernel_decorator(Cuda, False, {}, {"lineinfo": True})(measure)
    assert calls == [("measure", {"cache": False, "lineinfo": True})]
