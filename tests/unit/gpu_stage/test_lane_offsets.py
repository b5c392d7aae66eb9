"""A batch's output layout from pass 1's sizes and the native core's rows, against a NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_stage.transform.device.packed import _offsets


def _reference(sizes: np.ndarray, rest_rows: np.ndarray, rest_ends: np.ndarray) -> tuple[np.ndarray, ...]:
    full = sizes.copy()
    full[rest_rows] = np.diff(rest_ends, prepend=0)
    rows = np.flatnonzero(full >= 0)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(full[rows], out=offsets[1:])
    starts = np.full(len(sizes), -1, dtype=np.int64)
    starts[rows] = offsets[:-1]
    rest_starts = starts[rest_rows]
    starts[sizes < 0] = -1
    return rows, offsets, starts, rest_starts


# Per row: the lane's size, a dead letter (None), or a native row of that many bytes (negative).
row_kinds = st.one_of(st.integers(0, 500), st.none(), st.integers(-500, -1))


@given(kinds=st.lists(row_kinds, max_size=200))
def test_offsets_agree_with_the_numpy_reference(kinds: list[int | None]) -> None:
    sizes = np.array([-1 if k is None or k < 0 else k for k in kinds], dtype=np.int64)
    rest_rows = np.array([r for r, k in enumerate(kinds) if k is not None and k < 0], dtype=np.int64)
    rest_ends = np.cumsum([-k for k in kinds if k is not None and k < 0], dtype=np.int64)
    got = _offsets(sizes, rest_rows, rest_ends)
    for mine, theirs in zip(got, _reference(sizes, rest_rows, rest_ends), strict=True):
        assert mine.tolist() == theirs.tolist()


def test_offsets_refuse_native_rows_the_lane_took_or_out_of_order() -> None:
    sizes = np.array([5, -1, -1], dtype=np.int64)
    with pytest.raises(ValueError, match="the lane took"):
        _offsets(sizes, np.array([0]), np.array([3]))
    with pytest.raises(ValueError, match="not increasing"):
        _offsets(sizes, np.array([2, 1]), np.array([3, 4]))
