"""Pass 2's output pieces (:func:`gpu_stage.transform.device.cuda.write_pieces`): cut at row boundaries only."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpu_stage.transform.device.cuda import write_pieces


def _offsets(sizes: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)


def test_an_empty_output_has_no_pieces() -> None:
    assert write_pieces(np.zeros(1, dtype=np.int64), 4096) == []


def test_pieces_end_at_the_first_row_boundary_past_each_multiple() -> None:
    # Rows of 3, 5, 2, 7, 1 bytes: boundaries 0 3 8 10 17 18; pieces of 6 bytes.
    assert write_pieces(_offsets([3, 5, 2, 7, 1]), 6) == [(0, 8), (8, 17), (17, 18)]


def test_piece_bytes_0_is_the_whole_output() -> None:
    assert write_pieces(_offsets([3, 5]), 0) == [(0, 8)]
    assert write_pieces(np.zeros(1, dtype=np.int64), 0) == []


def test_a_row_larger_than_a_piece_is_a_piece_of_its_own() -> None:
    assert write_pieces(_offsets([2, 100, 2]), 10) == [(0, 102), (102, 104)]


@given(sizes=st.lists(st.integers(1, 5000), min_size=1, max_size=300), piece=st.integers(1, 20_000))
def test_pieces_cover_the_output_once_at_row_boundaries(sizes: list[int], piece: int) -> None:
    offsets = _offsets(sizes)
    pieces = write_pieces(offsets, piece)
    boundaries = set(offsets.tolist())
    assert pieces[0][0] == 0 and pieces[-1][1] == int(offsets[-1])
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    assert all(lo in boundaries and hi in boundaries and lo < hi for lo, hi in pieces)
    assert all(hi - lo < piece + max(sizes) for lo, hi in pieces)
    # No piece could have ended earlier: it ends at the first boundary at or past lo + piece.
    assert all(hi == int(offsets[-1]) or not any(lo + piece <= b < hi for b in boundaries) for lo, hi in pieces)


def test_a_piece_is_a_sixth_of_the_output_within_its_bounds() -> None:
    """With pieces of at most 12 MiB, two output buffers of a piece each hold a third of a small batch's output.

    By default there are no pieces: a batch's output is written in one launch.
    """
    from gpu_stage.transform.device.cuda import MIN_PIECE_BYTES, WRITE_PIECE_BYTES, piece_bytes

    assert WRITE_PIECE_BYTES == 0 and piece_bytes(90 << 20, WRITE_PIECE_BYTES) == 0
    largest = 12 << 20
    assert piece_bytes(90 << 20, largest) == largest  # a 100 k batch: 12 MiB pieces
    assert piece_bytes(60 << 20, largest) == 10 << 20  # a sixth, under the largest
    assert piece_bytes(9_000_000, largest) == 1_500_000  # a 10 k batch: a sixth
    assert piece_bytes(9_000_001, largest) == 1_500_001  # rounded up: never a seventh piece for it
    assert piece_bytes(100_000, largest) == MIN_PIECE_BYTES  # small outputs: one piece
    assert piece_bytes(9_000_000, 4096) == 4096  # a smaller largest wins
    assert piece_bytes(9_000_000, 0) == 0  # 0: the whole output at once


@given(st.lists(st.integers(1, 5000), min_size=1, max_size=400))
def test_pieces_of_a_quarter_number_at_most_four(sizes: list[int]) -> None:
    from gpu_stage.transform.device.cuda import piece_bytes

    offsets = _offsets(sizes)
    total = int(offsets[-1])
    pieces = write_pieces(offsets, piece_bytes(total, 1 << 40))
    assert len(pieces) <= 4
    assert pieces[0][0] == 0 and pieces[-1][1] == total
