"""GPU_STAGE_LANE_OUTLINE: which device functions the CUDA kernels call instead of inlining.

The lowering itself needs numba-cuda's compiler (run on a GPU host by `bench/gpu_host.sh OUT outline`);
here: the names are checked at start, they key the kernel cache, and the hook marks only the functions
it was given, of the module it was given.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from gpu_stage.transform.device import kernels
from llmpipe.errors import ConfigError


def test_the_measured_set_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kernels.OUTLINE_ENV, raising=False)
    assert kernels.lane_outline() == ("escape_code", "member", "scan_number", "scan_string", "skip_value")
    assert set(kernels.lane_outline()) <= kernels._device_function_names()


@pytest.mark.parametrize("given", ["none", " none ", ""])
def test_none_or_empty_inlines_everything(monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.setenv(kernels.OUTLINE_ENV, given)
    assert kernels.lane_outline() == ()


def test_names_are_trimmed_deduplicated_and_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernels.OUTLINE_ENV, " skip_value,scan_string,, skip_value ")
    assert kernels.lane_outline() == ("scan_string", "skip_value")


def test_an_unknown_name_is_a_config_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernels.OUTLINE_ENV, "scan_string,no_such_function")
    with pytest.raises(ConfigError, match=rf"^{kernels.OUTLINE_ENV}: no_such_function not among"):
        kernels.lane_outline()


def test_the_warp_builds_functions_are_names_too() -> None:
    names = kernels._device_function_names()
    assert {"scan_string", "skip_value", "measure", "write"} <= names
    assert set(kernels._WARP_FUNCTIONS) <= names


def test_each_outline_compiles_into_a_cache_folder_of_its_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("numba")
    folders = []
    for names in ("", "scan_string", "scan_string,skip_value", ""):
        monkeypatch.setenv(kernels.OUTLINE_ENV, names)
        ns = kernels._cached_namespace("cpu", tmp_path)
        folders.append(ns["_cache"])
    assert len(set(folders[:3])) == 3 and folders[3] == folders[0]


class _Lowering:
    """Stands in for numba-cuda's CUDALower: a function's name, module and LLVM attributes."""

    def __init__(self, module: str, name: str, attributes: set[str]) -> None:
        self.fndesc = types.SimpleNamespace(modname=module, qualname=name)
        self.builder = types.SimpleNamespace(function=types.SimpleNamespace(attributes=attributes))
        self.lowered = False

    def pre_lower(self) -> None:
        self.lowered = True


def test_the_hook_marks_the_named_functions_of_the_named_module_only(monkeypatch: pytest.MonkeyPatch) -> None:
    fake: Any = types.ModuleType("numba.cuda.lowering")
    fake.CUDALower = type("CUDALower", (_Lowering,), {})
    monkeypatch.setitem(sys.modules, "numba.cuda.lowering", fake)
    monkeypatch.setattr(kernels, "_OUT_OF_LINE", {})
    kernels._keep_out_of_line("lane_a", ("scan_string",))
    kernels._keep_out_of_line("lane_a", ("scan_string",))  # wrapped once, not twice

    def lowered(module: str, name: str, attributes: set[str]) -> set[str]:
        lowering = fake.CUDALower(module, name, attributes)
        lowering.pre_lower()
        assert lowering.lowered
        return attributes

    assert lowered("lane_a", "scan_string", set()) == {"noinline"}
    assert lowered("lane_a", "skip_ws", set()) == set()
    assert lowered("lane_b", "scan_string", set()) == set()
    assert lowered("lane_a", "scan_string", {"alwaysinline"}) == {"alwaysinline"}


def test_no_names_leave_numba_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_OUT_OF_LINE", {})
    kernels._keep_out_of_line("lane_a", ())
    assert kernels._OUT_OF_LINE == {}
