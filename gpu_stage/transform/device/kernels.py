"""Compile the device lane's sources for a target: CUDA, or the CPU that the tests run.

The row functions (:mod:`gpu_stage.transform.device.scan` to :mod:`gpu_stage.transform.device.rows`)
are compiled per target by executing their source with that target's decorators, so CUDA and the
CPU run the same code and the CPU run is what the tests compare, byte for byte, with the native core.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import logging
import os
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gpu_stage.transform.api import LANE_REGISTERS
from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)
_HERE = Path(__file__).parent
LINEINFO_ENV = "GPU_STAGE_LANE_LINEINFO"
"""Set to 1, the CUDA kernels carry source line information (for a profiler's per-line figures);
the code is the same, and it is cached apart."""
OUTLINE_ENV = "GPU_STAGE_LANE_OUTLINE"
"""A comma list of the lane's device functions that the CUDA kernels call instead of inlining;
``none`` (or empty) inlines them all, and unset means :data:`DEFAULT_OUTLINE`. Inlined at every call
site, pass 1's kernel holds over 2 MB of machine code, more than an SM's instruction caches; out of
line it is smaller, at the cost of calls and a stack frame. Which is faster is measured
(``bench/gpu_host.sh OUT candidates``); the output is the same, and each set is cached apart."""
DEFAULT_OUTLINE = ("escape_code", "member", "scan_number", "scan_string", "skip_value")
"""The functions kept out of line unless :data:`OUTLINE_ENV` says otherwise: on the H200, pass 1 over
real-shaped bodies ran 1.21x as fast with these five out of line as with all inlined (the same bytes
out), and 1.05x as fast as with ``scan_string,skip_value`` alone."""
PASS_1_KERNELS = ("measure", "measure_ordered")
"""The kernels a build's register cap applies to (:func:`compile_lane`'s ``registers``)."""
TARGETS = ("cpu", "cuda", "cpu-warp", "cuda-warp")
"""``cpu`` (numba.njit) and ``cuda`` (numba.cuda): one thread per body. ``cuda-warp``: a warp per body,
strings read by its 32 threads together (:mod:`gpu_stage.transform.device.warp`); ``cpu-warp``: the same code on
the CPU, the warp's ballots done lane by lane (what the tests compare)."""
_SOURCES = (
    "scan.py", "strings.py", "warp.py", "strict.py", "record.py", "slots.py", "walk.py", "content.py", "emit.py",
    "rows.py", "order.py",
)  # fmt: skip


@functools.cache
def compile_lane(target: str, cache: Path | None = None, registers: int = 0) -> SimpleNamespace:
    """The lane's functions compiled for ``target``, once per process: see :data:`TARGETS`.

    numba compiles each function on its first call; the content schema is data (:class:`ContentTables`),
    so one compilation serves every schema. With ``cache`` the compiled code is kept on disk between
    processes (a worker then starts in about a second instead of tens): see :func:`_cached_namespace`.
    ``registers`` (``cuda`` only; 0: the compiler's choice) caps the registers per thread of pass 1's
    kernels (:data:`PASS_1_KERNELS`); each cap is a build of its own, cached apart.
    """
    if target not in TARGETS:
        msg = f"unknown lane target {target!r}"
        raise ConfigError(msg)
    if registers and not (target == "cuda" and LANE_REGISTERS[0] <= registers <= LANE_REGISTERS[1]):
        msg = f"a register cap of {registers} for lane target {target!r}"
        raise ConfigError(msg)
    if cache is not None:
        try:
            return _compile(target, _cached_namespace(target, cache, registers), registers)
        except Exception as exc:  # an unwritable folder, a numba without caching: compile as before
            log.warning("device lane kernels not cached in %s: %s", cache, exc)
    suffix = f"_r{registers}" if registers else ""
    return _compile(target, {"__name__": f"gpu_stage.transform.device.compiled_{target.replace('-', '_')}{suffix}"},
                    registers)  # fmt: skip


def _compile(target: str, ns: dict[str, Any], registers: int = 0) -> SimpleNamespace:
    """Execute the lane's sources into ``ns`` with ``target``'s decorators (cached ones when ``ns`` says so)."""
    folder = ns.get("_cache")
    ns["LANE_STEPS"] = target.endswith("-warp")
    with _numba_cache_dir(folder):
        if target.startswith("cpu"):
            import numba

            plain: Callable[..., Any] = numba.njit(cache=folder is not None)
            ns.update(jit=plain, kernel=plain)
            ns["lane_start"] = plain(_zero)
            ns["lane_step"] = plain(_one)
            ns["atomic_add"] = plain(_add)
        else:
            cuda: Any = importlib.import_module("numba.cuda")
            lines = {"lineinfo": True} if _lineinfo() else {}
            _keep_out_of_line(ns["__name__"], lane_outline())
            # Kernels are cached whole (their device functions are compiled into them).
            caps = dict.fromkeys(PASS_1_KERNELS, registers) if registers else {}
            kernel = _kernel_decorator(cuda, folder is not None, caps, lines)
            ns.update(jit=cuda.jit(device=True, **lines), kernel=kernel)
            exec(_GRID_SOURCE, ns)
            device = ["atomic_add", "lane_start", "lane_step"]
            if ns["LANE_STEPS"]:
                exec(_WARP_SOURCE, ns)
                device += _WARP_FUNCTIONS
            for name in dict.fromkeys(device):
                ns[name] = cuda.jit(device=True, **lines)(ns[name])
        for source in _SOURCES:
            path = _HERE / source
            exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), ns)
    return SimpleNamespace(**ns)


def _kernel_decorator(cuda: Any, cached: bool, caps: dict[str, int], lines: dict[str, bool]) -> Callable[..., Any]:
    """numba-cuda's ``jit`` for a kernel, with its register cap from ``caps`` (by the function's name) if any."""

    def kernel(fn: Any) -> Any:
        cap = {"max_registers": caps[fn.__name__]} if fn.__name__ in caps else {}
        return cuda.jit(cache=cached, **cap, **lines)(fn)

    return kernel


def _cached_namespace(target: str, cache: Path, registers: int = 0) -> dict[str, Any]:
    """A fresh module for the lane's functions, registered under a name keyed by everything they compile from.

    numba keys a cached function by its source file's time stamp only, but a lane kernel compiles
    in functions of other files: so each version of the lane's sources (and of numba, Python, the
    target and its register cap) gets a folder of its own. The functions must belong to an
    importable module for numba to store and load them, hence the entry in ``sys.modules``.
    """
    import numba

    digest = hashlib.sha256()
    sources = (_HERE / s for s in (*_SOURCES, "kernels.py"))
    for part in (target, registers, _lineinfo(), lane_outline(), numba.__version__, sys.version, *sources):
        digest.update(part.read_bytes() if isinstance(part, Path) else str(part).encode())
    key = digest.hexdigest()[:16]
    folder = cache / f"lane-{target}-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"gpu_stage.transform.device._compiled_{target.replace('-', '_')}_{key}"
    module = sys.modules.get(name) or types.ModuleType(name)
    sys.modules[name] = module
    module.__dict__.update(_cache=folder)
    return module.__dict__


@contextmanager
def _numba_cache_dir(folder: Path | None) -> Iterator[None]:
    """Numba's cache folder while the lane's functions are defined (each takes it from the config then)."""
    if folder is None:
        yield
        return
    config: Any = importlib.import_module("numba.core.config")  # its settings are set at run time, untyped
    before = config.CACHE_DIR
    config.CACHE_DIR = str(folder)
    try:
        yield
    finally:
        config.CACHE_DIR = before


def _lineinfo() -> bool:
    """Whether the CUDA kernels are built with source line information (:data:`LINEINFO_ENV`)."""
    return os.environ.get(LINEINFO_ENV) == "1"


def lane_outline() -> tuple[str, ...]:
    """The device functions kept out of line (:data:`OUTLINE_ENV`), sorted; an unknown name is a ConfigError."""
    given = os.environ.get(OUTLINE_ENV)
    if given is None:
        return DEFAULT_OUTLINE
    if given.strip() == "none":
        return ()
    names = tuple(sorted({n.strip() for n in given.split(",") if n.strip()}))
    known = _device_function_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        msg = f"{OUTLINE_ENV}: {', '.join(unknown)} not among the lane's device functions ({', '.join(sorted(known))})"
        raise ConfigError(msg)
    return names


@functools.cache
def _device_function_names() -> frozenset[str]:
    """Every function the lane's sources define (the candidates for :data:`OUTLINE_ENV`)."""
    import ast

    names = set(_WARP_FUNCTIONS)
    for source in _SOURCES:
        tree = ast.parse((_HERE / source).read_text(encoding="utf-8"))
        names.update(node.name for node in tree.body if isinstance(node, ast.FunctionDef))
    return frozenset(names)


_OUT_OF_LINE: dict[str, frozenset[str]] = {}
"""Module name of a compiled lane → the functions of it that are lowered with LLVM's ``noinline``."""


def _keep_out_of_line(module: str, names: tuple[str, ...]) -> None:
    """Have numba-cuda lower ``names`` of ``module`` as called functions, not inlined ones.

    numba-cuda has no option for this (only ``forceinline``), so its CUDA lowering's ``pre_lower`` is
    wrapped, once per process, to add the attribute to the functions listed in :data:`_OUT_OF_LINE`;
    every other function is lowered as before. numba's CUDA simulator runs the Python functions
    themselves and lowers nothing, so there is nothing to mark.
    """
    config: Any = importlib.import_module("numba.core.config")
    if not names or config.ENABLE_CUDASIM:
        return
    lowering: Any = importlib.import_module("numba.cuda.lowering")
    _OUT_OF_LINE[module] = frozenset(names)
    lower = lowering.CUDALower
    if getattr(lower.pre_lower, "_lane_out_of_line", False):
        return
    before = lower.pre_lower

    def pre_lower(self: Any) -> None:
        before(self)
        attributes = self.builder.function.attributes
        if self.fndesc.qualname in _OUT_OF_LINE.get(self.fndesc.modname, ()) and "alwaysinline" not in attributes:
            attributes.add("noinline")

    pre_lower._lane_out_of_line = True  # type: ignore[attr-defined]
    lower.pre_lower = pre_lower


def _zero() -> int:
    return 0


def _one() -> int:
    return 1


def _add(array: Any, i: int, value: int) -> Any:
    """``array[i] += value``, returning the value before (one thread: no other can come between)."""
    old = array[i]
    array[i] = old + value
    return old


# The first row and the row stride of a grid-stride loop, and an atomic add that returns the value
# before; ``cuda`` must be a global of the functions.
_GRID_SOURCE = """
from numba import cuda


def lane_start():
    return cuda.grid(1)


def lane_step():
    return cuda.gridsize(1)


def atomic_add(array, i, value):
    return cuda.atomic.add(array, i, value)
"""


# The lane's ``warp`` build: a warp per body (its number the grid's thread number over 32), and the
# parts of a string step that :mod:`gpu_stage.transform.device.warp` writes lane by lane, here one
# lane's share and the warp's ballots. A lane's piece decodes to at most 4 bytes (3 bits), so the
# warp's sum of them, and each lane's sum of those below it (where a copy writes), are three ballots
# and their bit counts: independent of each other, unlike a chain of shuffles. Masks are int64, a
# ballot made unsigned (32 bits). A copy ends with the warp's barrier: after it every lane reads the
# text that the other lanes wrote (pass 1 decodes in place, then walks the decoded content), and only a barrier
# orders those writes before the reads (a ballot synchronizes the lanes, not their memory).
_WARP_FUNCTIONS = (
    "lane_start", "lane_step", "ballot", "lane_sums", "warp_marks", "warp_widths", "warp_copy", "warp_copy_checked",
    "warp_copy_bytes", "warp_spaces", "warp_escapes", "warp_copy_lanes", "warp_plain_marks", "first_bit", "last_bit",
    "bit_count",
)  # fmt: skip
_WARP_SOURCE = """
from numba import cuda, int64

FULL = 0xFFFFFFFF


def lane_start():
    return cuda.grid(1) // 32


def lane_step():
    return cuda.gridsize(1) // 32


def ballot(predicate):
    # numba's ballot_sync is a signed int32: lane 31's bit would sign-extend into bits 32-63.
    return int64(cuda.ballot_sync(FULL, predicate)) & 0xFFFFFFFF


def first_bit(mask):
    return cuda.popc((mask & -mask) - 1)


def last_bit(mask):  # a 32-bit mask's highest bit: its bits below it all set, counted
    mask |= mask >> 1
    mask |= mask >> 2
    mask |= mask >> 4
    mask |= mask >> 8
    mask |= mask >> 16
    return cuda.popc(mask) - 1


def bit_count(mask):
    return cuda.popc(mask)


def warp_marks(b, p, e):
    c = lane_byte(b, p, e, cuda.laneid)
    quotes = ballot(c == 34)
    slashes = ballot(c == 92)
    return quotes, slashes, ballot(odd_byte(c))


def lane_sums(width, lane):
    below = 0
    total = 0
    for k in (0, 1, 2):
        bits = ballot(((width >> k) & 1) != 0)
        below += cuda.popc(bits & ((1 << lane) - 1)) << k
        total += cuda.popc(bits) << k
    return below, total


def warp_widths(b, p, e, stop, starts, covered):
    width, _, _, bad = lane_piece(b, p, e, cuda.laneid, stop, starts, covered, True)
    _, total = lane_sums(width, cuda.laneid)
    return total, cuda.ballot_sync(FULL, bad) != 0


def warp_copy(b, p, e, stop, starts, covered, out, q, limit):
    lane = cuda.laneid
    width, value, escaped, _ = lane_piece(b, p, e, lane, stop, starts, covered, False)
    below, total = lane_sums(width, lane)
    if width > 0 and q + below < limit:
        lane_put(out, q + below, width, value, escaped)
    cuda.syncwarp(FULL)
    return min(q + total, limit)


def warp_copy_checked(b, p, e, stop, starts, covered, out, q):
    lane = cuda.laneid
    width, value, escaped, bad = lane_piece(b, p, e, lane, stop, starts, covered, True)
    below, total = lane_sums(width, lane)
    if width > 0:
        lane_put(out, q + below, width, value, escaped)
    return q + total, ballot(bad) != 0


def warp_copy_bytes(src, s, out, q, n):
    for k in range(cuda.laneid, n, 32):
        out[q + k] = src[s + k]
    cuda.syncwarp(FULL)


def warp_copy_lanes(src, p, out, lanes):
    lane = cuda.laneid
    if (lanes >> lane) & 1:
        out[p + lane] = src[p + lane]
    cuda.syncwarp(FULL)


def warp_plain_marks(t, p, quotes, opens):
    lane = cuda.laneid
    if (opens >> lane) & 1:
        span = first_bit(quotes >> (lane + 1)) + 1
        t[p + lane] = span
        t[p + lane + span] = span - 1


def warp_spaces(b, p, e):
    k = p + cuda.laneid
    return ballot(k < e and is_ws(b[k]))


def warp_escapes(b, p, e, starts):
    lane = cuda.laneid
    span = escape_span(b, p + lane, e) if (starts >> lane) & 1 else 0
    return ballot(span == 5), ballot(span == 11)
"""
