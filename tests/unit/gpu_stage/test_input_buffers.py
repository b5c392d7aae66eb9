"""The packed lane's index of its input buffers: which buffer a batch's column lies in, by address."""

from __future__ import annotations

import gc

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.device.packed import InputBuffers


def _buffers(count: int, size: int = 64) -> list[npt.NDArray[np.uint8]]:
    return [np.zeros(size, dtype=np.uint8) for _ in range(count)]


def test_a_view_is_found_in_the_buffer_that_holds_it_and_nowhere_else() -> None:
    index = InputBuffers()
    held = _buffers(3)
    for buffer in held:
        index.add(buffer)
    for buffer in held:
        assert index.holder(buffer[10:20]) is buffer
        assert index.holder(buffer) is buffer
        assert index.holder(buffer[63:]) is buffer
    assert index.holder(np.zeros(8, dtype=np.uint8)) is None  # never indexed
    assert index.holder(held[0][:0]) is None  # empty: lies nowhere


def test_a_view_running_past_its_buffers_end_is_not_held() -> None:
    index = InputBuffers()
    block = np.zeros(128, dtype=np.uint8)
    first, second = block[:64], block[64:]  # adjacent, as two allocations may be
    index.add(first)
    index.add(second)
    assert index.holder(block[60:70]) is None
    assert index.holder(block[64:70]) is second


def test_thousands_of_buffers_each_find_their_own_views() -> None:
    index = InputBuffers()
    held = _buffers(3000, size=16)
    for buffer in held:
        index.add(buffer)
    assert len(index) == 3000
    assert all(index.holder(b[3:9]) is b for b in held)


class _At:
    """Stands for a column at an address: all the index reads of an array (no memory is touched)."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__array_interface__ = {"data": (address, False)}
        self.nbytes = nbytes


def test_a_dead_buffer_is_no_longer_found_and_its_start_is_dropped() -> None:
    index = InputBuffers()
    keep = _buffers(4)
    for buffer in keep:
        index.add(buffer)
    dead = _buffers(100)
    for buffer in dead:
        index.add(buffer)
    spans = [(b.__array_interface__["data"][0], b.nbytes) for b in dead]
    del dead, buffer
    gc.collect()
    assert len(index) == 4
    live = {b.__array_interface__["data"][0] for b in keep}
    for start, nbytes in spans:
        if start not in live:  # the allocator may have handed a dead buffer's memory to a kept one
            assert index.holder(_At(start + 1, nbytes - 2)) is None  # type: ignore[arg-type]
    assert not set(index._starts) - live  # every dead start met by a lookup is gone
    for _ in range(40):  # buffers that die at once: adding prunes the starts of the dead
        index.add(np.zeros(8, dtype=np.uint8))
    assert len(index) == 4 and len(index._starts) <= 2 * 4 + 17
    assert all(index.holder(b[1:5]) is b for b in keep)
