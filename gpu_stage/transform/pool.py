"""Host buffers that are reused once nothing refers to them any more.

A batch's buffers are large (tens of MB) and short-lived. Allocating them anew for each batch costs
page faults on fresh memory (the kernel zeroes every page first), and for the device lane,
page-locking them costs milliseconds more. A pool hands the same few buffers out again instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]


class HostPool:
    """Buffers from ``allocate``, each taken again once nothing outside the pool refers to it.

    A user's arrays are views of a pooled buffer; every view (and every view of a view) holds a
    reference to the buffer, so a buffer whose reference count is back to the pool's own is free.
    Past ``keep`` buffers, a taken-but-busy pool allocates buffers that are not pooled.
    """

    def __init__(self, allocate: Callable[[int], U8], keep: int = 4) -> None:
        """``allocate(size)`` makes a buffer (page-locked for the device); at most ``keep`` are pooled."""
        self._allocate = allocate
        self._keep = keep
        self._buffers: list[U8] = []

    def take(self, size: int) -> U8:
        """A buffer of at least ``size`` bytes that nothing else refers to."""
        free = [b for b in self._buffers if sys.getrefcount(b) <= _POOLED_REFS]
        fits = [b for b in free if len(b) >= size]
        if fits:
            return min(fits, key=len)
        if free:  # grow: drop the largest free buffer that is too small
            largest = max(free, key=len)
            self._buffers = [b for b in self._buffers if b is not largest]
        # Page-locking a buffer costs milliseconds: leave room for the next, slightly larger batches.
        buffer = self._allocate(_with_room(size))
        if len(self._buffers) < self._keep:
            self._buffers.append(buffer)
        return buffer

    def held_bytes(self) -> int:
        """Bytes of the pooled buffers."""
        return sum(len(b) for b in self._buffers)


def host_buffer(size: int) -> U8:
    """A plain host buffer of ``size`` bytes (a pool's ``allocate`` where nothing needs page-locking)."""
    return np.empty(size, dtype=np.uint8)


def _with_room(size: int) -> int:
    """``size`` plus an eighth, rounded up to a whole MiB."""
    return -(-(max(size, 1) + size // 8) // _MIB) * _MIB


_MIB = 1 << 20
# A pooled buffer's references when nothing outside the pool holds it: the list, the comprehension's
# loop variable and getrefcount's own argument.
_POOLED_REFS = 3
