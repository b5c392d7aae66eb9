"""Eight bytes of a body in one load: the device lane's word reads, for numba on the CPU and on CUDA.

The lane walks a body one byte at a time, and on the device every byte is a load of its own. Long
runs of plain text (inside strings, where nothing but a quote, a backslash, a control byte or a
non-ASCII byte needs a look) are read here a word at a time instead: :func:`aligned_word` gives the
8-byte word, at an 8-aligned address, that holds byte ``i`` of an array, and :func:`word_lag`
says how far byte ``i`` lies past such an address. A word starting at a byte of lag 0 is then one
aligned load (``ld.u64`` on the device), never a read outside the array when its last byte is in it.

Plain Python versions serve where the lane's sources run unjitted (the tests of single functions);
:func:`word_functions` gives the intrinsics for a target.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt


def plain_aligned_word(b: npt.NDArray[np.uint8], i: int) -> int:
    """The little-endian word at the 8-aligned address at or below ``b[i]`` (plain Python)."""
    lag = plain_word_lag(b, i)
    return int.from_bytes(b[i - lag : i - lag + 8].tobytes(), "little")


def plain_word_lag(b: npt.NDArray[np.uint8], i: int) -> int:
    """How many bytes ``b[i]`` lies past an 8-aligned address (plain Python)."""
    return (int(b.__array_interface__["data"][0]) + i) & 7


@cache
def word_functions(target: str) -> tuple[Any, Any]:
    """``(aligned_word, word_lag)`` as numba intrinsics for ``"cpu"`` or ``"cuda"``."""
    from llvmlite import ir
    from numba.core import types

    extending = "numba.cuda.extending" if target == "cuda" else "numba.core.extending"
    intrinsic: Any = importlib.import_module(extending).intrinsic

    i64 = ir.IntType(64)

    def address(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        """The address of ``array[index]`` as an integer (the array's data pointer plus the index)."""
        array = context.make_array(signature.args[0])(context, builder, args[0])
        index = context.cast(builder, args[1], signature.args[1], types.int64)
        return builder.add(builder.ptrtoint(array.data, i64), index)

    @intrinsic  # type: ignore[untyped-decorator]
    def aligned_word(typingctx: Any, array: Any, index: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            at = builder.and_(address(context, builder, signature, args), ir.Constant(i64, ~7))
            return builder.load(builder.inttoptr(at, i64.as_pointer()), align=8)

        return types.uint64(array, index), codegen

    @intrinsic  # type: ignore[untyped-decorator]
    def word_lag(typingctx: Any, array: Any, index: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.and_(address(context, builder, signature, args), ir.Constant(i64, 7))

        return types.int64(array, index), codegen

    return aligned_word, word_lag
