"""Launching a compiled CUDA kernel with its device arrays' launch parameters converted once.

numba-cuda converts every argument on every launch (``_Kernel._prepare_args``: a device array
becomes seven to nine launch parameters through several Python calls, tens of microseconds each).
The lane launches two kernels with about thirty device arrays each, several times per batch, from
the one thread that feeds the device, and its buffers are reused batch after batch, so their
parameters do not change. :class:`DirectLaunch` keeps each array's parameters, keyed by the array
object (held weakly, so a freed buffer's entry cannot be taken by a new one), and converts scalars
on each call, both through numba's own conversion.

The first launch goes through the dispatcher, which compiles (or loads) the kernel and picks its
overload. Later launches go to the driver directly when the kernel has exactly one overload, no
debug checks, no cooperative launch and no argument extensions, and each argument has the type that
overload was compiled for; anything else goes through the dispatcher as before. This leans on
numba-cuda's kernel internals (``argument_types``, ``_prepare_args``, ``_codelibrary``): a numba-cuda
without them is detected on the first launch and served by the dispatcher.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_MAX_ARRAYS = 4096
"""Array entries kept before the table is cleared (batches of many sizes make many views)."""


class DirectLaunch:
    """One kernel's launches: through the dispatcher first, then straight to the driver.

    ``launcher`` builds the driver call; by default it is made from the kernel's numba-cuda internals
    (:func:`driver_launcher`). ``direct`` and ``dispatched`` count the launches each way.
    """

    def __init__(self, dispatcher: Any, launcher: Callable[[Any], Any] | None = None) -> None:
        self.dispatcher = dispatcher
        self._make_launcher = launcher or driver_launcher
        self._kernel: Any = None
        self._launch: Any = None  # the driver call, or False when this kernel is always dispatched
        self._types: tuple[Any, ...] = ()
        self._is_array: tuple[bool, ...] = ()
        self._arrays: dict[int, tuple[weakref.ref[Any], list[Any]]] = {}
        self.direct = 0
        self.dispatched = 0

    def __call__(self, blocks: int, threads: int, stream: Any, *args: Any) -> None:
        """Launch ``blocks`` blocks of ``threads`` threads on ``stream`` with ``args``."""
        params = self._params(args, stream) if self._launch else None
        if params is None:
            self.dispatcher[blocks, threads, stream](*args)
            self.dispatched += 1
            if self._launch is None:
                self._take_kernel()
            return
        self._launch(stream, blocks, threads, params)
        self.direct += 1

    def _take_kernel(self) -> None:
        """After the first launch: the kernel to launch directly, or none (always dispatch)."""
        self._launch = False
        overloads = list(getattr(self.dispatcher, "overloads", {}).values())
        if len(overloads) != 1:
            return
        kernel = overloads[0]
        try:
            launch = self._make_launcher(kernel)
            types = tuple(kernel.argument_types)
        except (AttributeError, ImportError, TypeError) as exc:
            log.info("kernel %s launched through the dispatcher: %s", getattr(kernel, "entry_name", "?"), exc)
            return
        if launch is None:
            return
        self._kernel, self._types, self._launch = kernel, types, launch
        self._is_array = tuple(_is_array_type(t) for t in types)

    def _params(self, args: tuple[Any, ...], stream: Any) -> list[Any] | None:
        """The launch parameters of ``args``, or None when one has another type than the kernel's."""
        if len(args) != len(self._types):
            return None
        params: list[Any] = []
        kernel, typeof = self._kernel, self.dispatcher.typeof_pyval
        for ty, value, is_array in zip(self._types, args, self._is_array, strict=True):
            if is_array:
                converted = self._array(ty, value, stream)
                if converted is None:
                    return None
                params.extend(converted)
            elif typeof(value) == ty:
                kernel._prepare_args(ty, value, stream, [], params)
            else:
                return None
        return params

    def _array(self, ty: Any, value: Any, stream: Any) -> list[Any] | None:
        """A device array's parameters, converted on its first launch and kept while it lives."""
        held = self._arrays.get(id(value))
        if held is not None and held[0]() is value:
            return held[1]
        if self.dispatcher.typeof_pyval(value) != ty:
            return None
        converted: list[Any] = []
        self._kernel._prepare_args(ty, value, stream, [], converted)
        if len(self._arrays) >= _MAX_ARRAYS:
            self._arrays.clear()
        with contextlib.suppress(TypeError):  # not weakly referable: converted again next time
            self._arrays[id(value)] = (weakref.ref(value), converted)
        return converted


def _is_array_type(ty: Any) -> bool:
    """Whether a numba type is an array type (numba-cuda has its own type classes, so by shape)."""
    return all(hasattr(ty, name) for name in ("ndim", "layout", "dtype"))


def driver_launcher(kernel: Any) -> Callable[[Any, int, int, list[Any]], None] | None:
    """The driver call numba-cuda's ``_Kernel.launch`` makes, without its argument conversion.

    None for a kernel the direct path does not serve (debug checks, cooperative launch, argument
    extensions). Launch configurations are kept per grid size.
    """
    if getattr(kernel, "debug", False) or getattr(kernel, "cooperative", False) or getattr(kernel, "extensions", None):
        return None
    dispatcher: Any = importlib.import_module("numba.cuda.dispatcher")
    launch, config_class = dispatcher.launch, dispatcher.LaunchConfig
    cooperative_key = "is_cooperative" if _cuda_core_ge_1() else "cooperative_launch"
    function = kernel._codelibrary.get_cufunc().kernel
    configs: dict[tuple[int, int], Any] = {}

    def call(stream: Any, blocks: int, threads: int, params: list[Any]) -> None:
        config = configs.get((blocks, threads))
        if config is None:
            config = configs[(blocks, threads)] = config_class(
                grid=blocks, block=threads, shmem_size=0, **{cooperative_key: False}
            )
        launch(stream, config, function, *params)

    return call


def _cuda_core_ge_1() -> bool:
    """Whether cuda.core is 1.0 or later (its launch configuration renamed the cooperative flag)."""
    try:
        compat: Any = importlib.import_module("numba.cuda._compat")
    except ImportError:
        return False
    return bool(getattr(compat, "CUDA_CORE_GE_1_0", False))


def kernel_resources(launch: DirectLaunch, threads: int) -> dict[str, int | None] | None:
    """A launched kernel's registers and memory per thread, and how many of its blocks an SM keeps resident.

    The lane's kernels walk one body per thread and mostly wait on memory, so the warps an SM keeps
    resident (bounded by the registers each thread takes) are what hide that wait. Read from
    numba-cuda's compiled kernel (the one launched directly, else the only one) and the driver's
    occupancy query; None before the first launch, or where numba-cuda lacks these (a simulator, an
    older release), with a warning that says why once it has launched.
    """
    overloads = list(getattr(launch.dispatcher, "overloads", {}).values())
    kernel = launch._kernel if launch._kernel is not None else overloads[0] if len(overloads) == 1 else None
    if kernel is None:
        if overloads:  # compiled for several argument types, none launched directly: which one ran is unclear
            log.warning("no resources for kernel %s: %d overloads", _name(launch), len(overloads))
        return None
    try:
        cufunc = kernel._codelibrary.get_cufunc()
        context = importlib.import_module("numba.cuda").current_context()
        resident = int(context.get_active_blocks_per_multiprocessor(cufunc, threads, 0))
        device = context.device
        return {
            "threads_per_block": threads,
            "registers_per_thread": int(kernel.regs_per_thread),
            "code_bytes": _code_bytes(kernel),
            "local_bytes_per_thread": int(kernel.local_mem_per_thread),
            "shared_bytes_per_block": int(kernel.shared_mem_per_block),
            "max_threads_per_block": int(kernel.max_threads_per_block),
            "blocks_per_sm": resident,
            "warps_per_sm": resident * -(-threads // 32),
            "max_warps_per_sm": _device_attribute(device, "MAX_THREADS_PER_MULTIPROCESSOR", 32),
            "sms": _device_attribute(device, "MULTIPROCESSOR_COUNT"),
        }
    except Exception as exc:  # a report only: whatever numba-cuda or the driver raises leaves it out, said why
        log.warning("no resources for kernel %s: %s: %s", _name(launch), type(exc).__name__, exc)
        return None


def _name(launch: DirectLaunch) -> str:
    """The kernel's Python name, for the log."""
    return str(getattr(getattr(launch.dispatcher, "py_func", None), "__name__", "?"))


def _code_bytes(kernel: Any) -> int | None:
    """Bytes of the kernel's machine code (its cubin) as built, or None where numba-cuda holds none.

    A kernel larger than an SM's instruction caches stalls on fetching instructions; read from the
    built cubin only (bytes, or a ``cuda.core`` ``ObjectCode`` holding them), never compiled anew
    for this.
    """
    built = getattr(getattr(kernel, "_codelibrary", None), "_cubin_cache", None) or {}
    cubin = next(iter(built.values()), None)
    code = getattr(cubin, "code", cubin)  # newer numba-cuda keeps a cuda.core ObjectCode, its bytes in .code
    return len(code) if isinstance(code, (bytes, bytearray, memoryview)) else None


def _device_attribute(device: Any, name: str, per: int = 1) -> int | None:
    """A device attribute (divided by ``per``), or None where this numba-cuda does not name it."""
    value = getattr(device, name, None)
    return None if value is None else int(value) // per
