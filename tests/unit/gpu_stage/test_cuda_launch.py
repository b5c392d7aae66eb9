"""DirectLaunch's choice between the dispatcher and the driver, and its kept array parameters.

Runs without a GPU: the dispatcher and kernel here record what numba-cuda would be asked; the CUDA
tier (``tests/gpu/test_gpu_lane.py``) runs the same class against the real kernels and checks the
bytes they write.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from gpu_stage.transform.device.launch import DirectLaunch, _code_bytes, kernel_resources


@dataclass(frozen=True)
class ArrayType:
    """A numba array type's shape: what :class:`DirectLaunch` tells arrays from scalars by."""

    dtype: str
    ndim: int = 1
    layout: str = "C"


class DeviceArray:
    """A device array stand-in: a pointer and a dtype."""

    def __init__(self, ptr: int, dtype: str = "int64") -> None:
        self.ptr, self.dtype = ptr, dtype


@dataclass
class Kernel:
    """One compiled overload: its argument types and numba's conversion, counted per argument."""

    argument_types: tuple[Any, ...]
    converted: list[Any] = field(default_factory=list)

    def _prepare_args(self, ty: Any, value: Any, stream: Any, retr: list[Any], params: list[Any]) -> None:
        self.converted.append(value)
        params.extend((value.ptr, ty.dtype) if isinstance(ty, ArrayType) else (("scalar", value),))


class Dispatcher:
    """A dispatcher that compiles ``kernel`` on its first launch and records each dispatched launch."""

    def __init__(self, kernel: Kernel | None, overloads: int = 1) -> None:
        self.kernel, self.count, self.launched = kernel, overloads, []
        self.overloads: dict[Any, Kernel] = {}

    def __getitem__(self, config: tuple[int, int, Any]) -> Any:
        def launch(*args: Any) -> None:
            self.launched.append((config, args))
            if self.kernel is not None:
                self.overloads = {k: self.kernel for k in range(self.count)}

        return launch

    def typeof_pyval(self, value: Any) -> Any:
        return ArrayType(value.dtype) if isinstance(value, DeviceArray) else "int64" if type(value) is int else "other"


def _direct(kernel: Kernel | None, overloads: int = 1) -> tuple[DirectLaunch, Dispatcher, list[Any]]:
    driver: list[Any] = []
    dispatcher = Dispatcher(kernel, overloads)
    launch = DirectLaunch(dispatcher, lambda _: lambda stream, b, t, params: driver.append((stream, b, t, params)))
    return launch, dispatcher, driver


def test_the_first_launch_dispatches_and_the_next_go_to_the_driver() -> None:
    kernel = Kernel((ArrayType("int64"), "int64", ArrayType("uint8")))
    launch, dispatcher, driver = _direct(kernel)
    values, out = DeviceArray(100), DeviceArray(200, "uint8")
    launch(4, 128, "s", values, 7, out)
    launch(4, 128, "s", values, 8, out)
    launch(2, 64, "t", values, 9, out)
    assert len(dispatcher.launched) == 1 and (launch.dispatched, launch.direct) == (1, 2)
    assert driver == [
        ("s", 4, 128, [100, "int64", ("scalar", 8), 200, "uint8"]),
        ("t", 2, 64, [100, "int64", ("scalar", 9), 200, "uint8"]),
    ]
    # Each array converted once, each scalar on each launch.
    assert kernel.converted == [values, 8, out, 9]


def test_a_new_array_is_converted_and_a_freed_one_forgotten() -> None:
    kernel = Kernel((ArrayType("int64"),))
    launch, _, driver = _direct(kernel)
    first = DeviceArray(1)
    launch(1, 1, 0, first)
    launch(1, 1, 0, first)
    del first
    second = DeviceArray(2)
    launch(1, 1, 0, second)
    assert [params for *_, params in driver] == [[1, "int64"], [2, "int64"]]


def test_an_argument_of_another_type_goes_through_the_dispatcher() -> None:
    kernel = Kernel((ArrayType("int64"), "int64"))
    launch, dispatcher, driver = _direct(kernel)
    launch(1, 1, 0, DeviceArray(1), 5)
    launch(1, 1, 0, DeviceArray(1, "float64"), 5)
    launch(1, 1, 0, DeviceArray(1), 5.5)
    launch(1, 1, 0, DeviceArray(1))
    assert (len(dispatcher.launched), launch.direct, driver) == (4, 0, [])


def test_kernels_the_direct_path_does_not_serve_are_always_dispatched() -> None:
    for launch, dispatcher, driver in (_direct(Kernel((ArrayType("int64"),)), overloads=2), _direct(None)):
        for _ in range(3):
            launch(1, 1, 0, DeviceArray(1))
        assert (len(dispatcher.launched), launch.direct, driver) == (3, 0, [])
    refused = DirectLaunch(Dispatcher(Kernel((ArrayType("int64"),))), lambda _: None)
    for _ in range(2):
        refused(1, 1, 0, DeviceArray(1))
    assert (refused.dispatched, refused.direct) == (2, 0)


def test_no_kernel_resources_before_the_first_launch_or_without_numbas_internals() -> None:
    kernel = Kernel((ArrayType("int64"),))
    launch, _, _ = _direct(kernel)
    assert kernel_resources(launch, 128) is None
    launch(1, 128, "s", DeviceArray(100))
    assert kernel_resources(launch, 128) is None  # this stand-in has no compiled code library
    two, _, _ = _direct(kernel, overloads=2)
    two(1, 128, "s", DeviceArray(100))
    assert kernel_resources(two, 128) is None  # which of two overloads ran is not known


def test_missing_kernel_resources_say_why(caplog: Any) -> None:
    """Once launched, a kernel whose resources cannot be read is named in a warning with the reason."""
    kernel = Kernel((ArrayType("int64"),))
    launch, _, _ = _direct(kernel)
    launch(1, 128, "s", DeviceArray(100))
    two, _, _ = _direct(kernel, overloads=2)
    two(1, 128, "s", DeviceArray(100))
    with caplog.at_level(logging.WARNING, logger="gpu_stage.transform.device.launch"):
        assert kernel_resources(launch, 128) is None
        assert kernel_resources(two, 128) is None
    reasons = [r.getMessage() for r in caplog.records]
    assert len(reasons) == 2
    assert "AttributeError" in reasons[0]  # the stand-in has no compiled code library
    assert reasons[1].endswith(": 2 overloads")


class ObjectCode:
    """cuda.core's compiled code as newer numba-cuda keeps it: the cubin's bytes under ``code``."""

    def __init__(self, code: bytes) -> None:
        self.code = code


def test_code_bytes_read_a_plain_cubin_and_cuda_cores_object_code() -> None:
    """The machine code's size, whichever form numba-cuda keeps it in; None where it keeps none."""

    def built(cubin: Any) -> Any:
        library = type("Library", (), {"_cubin_cache": {} if cubin is None else {"sm_90": cubin}})()
        return type("Kernel", (), {"_codelibrary": library})()

    assert _code_bytes(built(b"\x7fELF" + bytes(96))) == 100
    assert _code_bytes(built(ObjectCode(bytes(4096)))) == 4096
    assert _code_bytes(built(None)) is None
    assert _code_bytes(built(ObjectCode(None))) is None  # type: ignore[arg-type]


def test_the_resources_name_each_pass_kernel_and_each_warp_per_row_kernel(monkeypatch: Any) -> None:
    from gpu_stage.transform.device import cuda

    executor = object.__new__(cuda.CudaExecutor)  # no device here: only what kernel_resources reads
    executor.measure_threads, executor.write_threads = 128, 256
    for name in cuda.PASS_KERNELS:
        setattr(executor, name, name)
    executor._warp_kernels = {"measure": "measure-by-warps"}
    monkeypatch.setattr(cuda, "kernel_resources", lambda launch, threads: {"of": launch, "threads": threads})
    found = executor.kernel_resources()
    assert found["measure"] == {"of": "measure", "threads": 128}
    assert found["write_ordered"] == {"of": "write_ordered", "threads": 256}
    assert found["measure_warp"] == {"of": "measure-by-warps", "threads": 128}
