r"""Run the CUDA ``warp`` build under numba's CUDA simulator; compare it with the one-thread build and the native core.

The CPU ``warp`` build runs the lanes of a step one after another, so the parts that only the CUDA
build has (:data:`gpu_stage.transform.device.kernels._WARP_SOURCE`: ballots, the lanes' sums,
each lane's own share) are not what the CPU tests run. numba's simulator runs a kernel's threads
as Python threads, but has no warp ballot; one is added here, made as numba's is (a signed 32-bit
int), so a mask that the build forgets to make unsigned shows. First strings (scan and copy) and
whitespace runs and the strings pass, then both passes of the lane a warp per row, the build's own kernels, on a few
real-shaped bodies (one of each kind in :data:`KINDS`) against the native core's output. Run in
a process of its own (``NUMBA_ENABLE_CUDASIM`` must be set before numba is imported):
``python tests/unit/gpu_stage/warp_simulated.py STRINGS``; exits 1 with the first string,
whitespace run or batch whose result differs.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import sys
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np

from bench import real_corpus
from tests.unit.gpu_stage.test_lane_strings import STEP_BODIES, strings_good

LANES = 32
PIECES = [
    b'\\"', b"\\\\", b"\\/", b"\\n", b"\\u00e9", b"\\uD83D\\uDE00", b"\\ud83d", b"\\u12", b"\\uZZZZ", b"\\x", b"\\",
    b'"', "é".encode(), "中".encode(), "😀".encode(), b"\x80", b"\xc3", b"\x01",
]  # fmt: skip
"""Escapes of every kind (good, broken, a pair, a lone half), UTF-8 of every width and broken, a control byte."""


def _ballot_sync(_module: Any, _mask: int, predicate: bool) -> int:
    """The warp's ballot for a block of one warp, a signed 32-bit int as numba's ``ballot_sync`` gives."""
    thread: Any = threading.current_thread()
    state = thread._manager.block_state
    state[thread.threadIdx.x] = bool(predicate)
    thread.syncthreads()
    bits = sum(1 << lane for lane in range(LANES) if state[lane])
    thread.syncthreads()
    return bits - (1 << LANES) if bits >> (LANES - 1) else bits


def _syncwarp(_module: Any, _mask: int = 0) -> None:
    threading.current_thread().syncthreads()  # type: ignore[attr-defined]


_KERNELS = """
def scan_kernel(b, e, allow, out):
    end, n = scan_string(b, 0, e, allow)
    if cuda.laneid == 0:
        out[0] = end
        out[1] = n


def copy_kernel(b, s, e, o, q, out):
    end = copy_string(b, s, e, o, q)
    if cuda.laneid == 0:
        out[0] = end


def mark_kernel(b, t, dec, e, out):
    n = mark_strings_steps(b, t, dec, 0, e)
    if cuda.laneid == 0:
        out[0] = n


def skip_kernel(b, p, e, out):
    end = skip_ws(b, p, e)
    if cuda.laneid == 0:
        out[0] = end
"""


KINDS: dict[str, Any] = {
    "escapes inside content": lambda v: b'\\\\\\"' in v,
    "\\u escapes": lambda v: b"\\u" in v,
    "tool call": lambda v: _compact_arguments(v),
    "stream chunk": lambda v: b"chat.completion.chunk" in v,
    "error body": lambda v: b'"error"' in v,
    "raw UTF-8": lambda v: max(v, default=0) >= 0x80,
    "text completion": lambda v: b"text_completion" in v,
}
"""The kinds of real-shaped body that the simulated passes take, each by its shortest one (the simulator is slow).

The simulator runs a warp's threads one after another, not in step; the lane's one-thread code
that every lane of a warp runs alike, rewriting the same bytes in place (tool arguments made
compact), relies on them running in step, as they do on the device. So the tool call is one whose
arguments are compact already: what the lane writes back is what it read.
"""


def _compact_arguments(body: bytes) -> bool:
    """A tool call whose arguments are a JSON object written without spaces."""
    at = body.find(b'"arguments"')
    arguments = body[at : body.find(b'}"', at) + 2]
    return at >= 0 and b'{\\"' in arguments and b'\\": ' not in arguments and b', \\"' not in arguments


def _bodies() -> list[bytes]:
    made = real_corpus.generate(300, seed=11).values
    return [min((v for v in made if wanted(v)), key=len) for wanted in KINDS.values()]


def _strings(count: int) -> list[bytes]:
    """Each piece just before, across and after the first step's end, then ``count`` random strings of pieces."""
    texts = [b'"' + b"a" * before + piece + b"b" + b'"' for piece in PIECES for before in (28, 30, 31)]
    rng = random.Random(20261205)
    for _ in range(count):
        parts = [rng.choice([*PIECES, b"x" * rng.randint(1, 40)]) for _ in range(rng.randint(0, 14))]
        texts.append(b'"' + b"".join(parts) + (b'"' if rng.random() < 0.8 else b"") + b"  ")
    return texts


_SWAPS: dict[int, list[Any]] = {}
_SWAPS_LOCK = threading.Lock()


@contextlib.contextmanager
def _swapped_cuda_module(fn: Any, fake_cuda_module: Any) -> Iterator[None]:
    """The simulator's swap of ``numba.cuda`` for its fake module in ``fn``'s globals, counted per globals.

    The simulator's threads share one globals dict. Its own swap puts the real module back when the
    first thread leaves a device function, while the others may still run in it: they then read
    ``cuda.popc`` or ``cuda.laneid`` from the real module and fail, or not, as the interpreter
    switches threads (a load-dependent failure). Here the real module comes back when the last
    thread leaves.
    """
    from numba import cuda

    globs = fn.__globals__
    with _SWAPS_LOCK:
        held = _SWAPS.get(id(globs))
        if held is None:
            real = {name: value for name, value in globs.items() if value is cuda}
            globs.update(dict.fromkeys(real, fake_cuda_module))
            held = _SWAPS[id(globs)] = [real, 0]
        held[1] += 1
    try:
        yield
    finally:
        with _SWAPS_LOCK:
            held[1] -= 1
            if held[1] == 0:
                globs.update(held[0])
                del _SWAPS[id(globs)]


def main(count: int) -> int:
    from numba import cuda
    from numba.cuda.simulator import kernel, kernelapi

    kernelapi.FakeCUDAModule.ballot_sync = _ballot_sync
    kernelapi.FakeCUDAModule.syncwarp = _syncwarp
    kernel.swapped_cuda_module = _swapped_cuda_module
    from gpu_stage.transform.device.kernels import compile_lane

    one, ns = compile_lane("cpu"), vars(compile_lane("cuda-warp"))
    exec(_KERNELS, ns)
    scan, copy, skip, mark = (cuda.jit(ns[f"{name}_kernel"]) for name in ("scan", "copy", "skip", "mark"))
    for run, fill in itertools.product((0, 1, 31, 32, 33, 64), (b" ", b" \r\n\t")):
        b = np.frombuffer(b"x" + (fill * run)[:run] + b"}", dtype=np.uint8).copy()
        for p, e in ((1, len(b)), (0, len(b)), (1, len(b) - 1), (1, 1 + run // 2)):
            got = np.zeros(1, dtype=np.int64)
            skip[1, LANES](b, p, e, got)
            if got[0] != one.skip_ws(b, p, e):
                print(f"skip_ws differs: {b.tobytes()!r} from {p} to {e}: {got[0]}")
                return 1
    strings = _strings(count)
    for text in strings:
        b = np.frombuffer(text, dtype=np.uint8).copy()
        for allow in (True, False):
            got = np.zeros(2, dtype=np.int64)
            scan[1, LANES](b, len(b), allow, got)
            if tuple(got) != tuple(one.scan_string(b, 0, len(b), allow)):
                print(f"scan differs: {text!r} allow={allow}: {tuple(got)}")
                return 1
        end = one.scan_string(b, 0, len(b), True)[0]
        if end > 0:
            want, out = np.zeros(len(b) + 5, np.uint8), np.zeros(len(b) + 5, np.uint8)
            q = one.copy_string(b.copy(), 1, end - 1, want, 5)
            got = np.zeros(1, dtype=np.int64)
            copy[1, LANES](b.copy(), 1, end - 1, out, 5, got)
            if got[0] != q or out.tobytes() != want.tobytes():
                print(f"copy differs: {text!r}")
                return 1
            if not _same_marks(one, mark, b"[" + text + b', "z\\n"]'):
                return 1
    for body, shift in itertools.product(STEP_BODIES, (0, 7, 31)):  # steps of several short strings
        if not _same_marks(one, mark, b" " * shift + body):
            return 1
    if not _same_passes(vars(compile_lane("cuda-warp"))):
        return 1
    print(f"the simulated warp build agrees on {len(strings)} strings, {len(STEP_BODIES)} bodies of short strings, "
          f"12 whitespace runs and {len(KINDS)} bodies")  # fmt: skip
    return 0


def _same_marks(one: Any, mark: Any, body: bytes) -> bool:
    """The strings pass a warp a body against a thread a body, on a body whose strings are all good.

    After a bad string the two may copy other bytes (no walk reads past one), so such a body passes.
    """
    b = np.frombuffer(body, dtype=np.uint8).copy()
    if not strings_good(one, b):
        return True
    marks = [np.zeros(len(b), dtype=np.uint16) for _ in range(2)]
    decoded = [np.zeros(len(b), dtype=np.uint8) for _ in range(2)]
    count = np.zeros(1, dtype=np.int64)
    mark[1, LANES](b, marks[0], decoded[0], len(b), count)
    want = one.mark_strings(b, marks[1], decoded[1], 0, len(b))
    if count[0] != want or marks[0].tobytes() != marks[1].tobytes() or decoded[0].tobytes() != decoded[1].tobytes():
        print(f"strings pass differs: {body!r}")
        return False
    return True


def _same_passes(ns: dict[str, Any]) -> bool:
    """Both passes a warp per row, the CUDA build's kernels, against the native core on :func:`_bodies`; then
    pass 2 a thread per row whose spans the CUDA build's ``copy_spans`` copies."""
    from dataclasses import replace

    from gpu_stage import synth
    from gpu_stage.transform.api import TransformSettings
    from gpu_stage.transform.device import executor
    from gpu_stage.transform.device.lane import LaneTransform
    from gpu_stage.transform.native import NativeBackend

    def launch(kernel: Any) -> Any:  # one warp; the simulator copies every array back, so none may be read-only
        return lambda *args: kernel[1, LANES](*(_writable(a) for a in args))

    simulated = SimpleNamespace(**{name: launch(ns[name]) for name in ("mark", "measure", "write", "copy_spans")})
    own = executor.compile_lane
    executor.compile_lane = lambda target, cache=None: simulated if target == "cpu-warp" else own(target, cache)
    settings = TransformSettings(max_record_bytes=1 << 20)
    lane = LaneTransform(replace(settings, lane_order="warp"), executor.CpuExecutor)
    batch = synth.batch(_bodies(), first_offset=7)
    want = NativeBackend(settings).parse(batch)
    # Pass 2 a warp per row; then a thread per row (the CPU build's) with its spans copied by the simulated warps.
    for write_warp in (1, 0):
        lane.executor.write_warp = write_warp
        before = lane.taken_rows
        got = lane.parse(batch)
        same = (got.encoded.rows.tolist(), got.encoded.offsets.tolist(), got.encoded.buf, got.bad) == (
            want.encoded.rows.tolist(), want.encoded.offsets.tolist(), want.encoded.buf, want.bad
        )
        taken = lane.taken_rows - before
        if not same or taken != len(batch):
            print(f"passes (write_warp {write_warp}) differ from the native core's (taken: {taken} of {len(batch)})")
            return False
    return True


def _writable(arg: Any) -> Any:
    return arg.copy() if isinstance(arg, np.ndarray) and not arg.flags.writeable else arg


if __name__ == "__main__":
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        sys.exit("set NUMBA_ENABLE_CUDASIM=1")
    sys.exit(main(int(sys.argv[1])))
