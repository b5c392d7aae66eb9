"""Packed record columns joined: several pieces' records written once, in order, into given arrays.

Records in packed form are ten columns (values, keys and headers back to back with their ends, a
key-is-null flag, partitions, offsets and timestamps; ``gpu_stage.transform.packed`` describes the
layout). A consume call returns one such piece and a batch is joined from several: the packed
reader's record buffer joins them into fresh arrays, the worker into one buffer that the device
lane reads in place. Both join them here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

COLUMN_KINDS = (np.uint8, np.int64, np.uint8, np.int64, np.uint8, np.uint8, np.int64, np.int64, np.int64, np.int64)
"""Each column's dtype, in order: value_buf, value_ends, key_buf, key_ends, key_null, header_buf,
header_ends, partitions, offsets, timestamps_ms."""

_BUF_OF_ENDS = {1: 0, 3: 2, 6: 5}
"""Each ends column's position and its buffer's."""

Piece = Sequence[npt.NDArray[np.generic]]
"""The ten columns of some records, in :data:`COLUMN_KINDS` order; a buffer may run past its last end."""


def last_end(ends: npt.NDArray[np.generic]) -> int:
    """Where the last item of a packed column ends: the column's bytes (0 for no items)."""
    return int(ends[-1]) if len(ends) else 0


def _used(piece: Piece, c: int) -> npt.NDArray[np.generic]:
    """Column ``c`` of ``piece``; of a buffer, only the bytes up to its last end."""
    if c in _BUF_OF_ENDS.values():
        return piece[c][: last_end(piece[c + 1])]
    return piece[c]


def joined_nbytes(pieces: Sequence[Piece]) -> list[int]:
    """The bytes each column of the joined records takes."""
    return [sum(_used(piece, c).nbytes for piece in pieces) for c in range(len(COLUMN_KINDS))]


def join_into(pieces: Sequence[Piece], out: Sequence[npt.NDArray[np.generic]]) -> None:
    """Write ``pieces``' records into ``out`` (one array per column, at least as long as the joined column).

    Each column is copied once; every piece's ends are shifted by the bytes of the pieces before it.
    """
    if not pieces:
        return
    for c, column in enumerate(out):
        if c in _BUF_OF_ENDS:
            base, at = 0, 0
            for piece in pieces:
                ends = piece[c]
                np.add(ends, base, out=column[at : at + len(ends)])
                base += last_end(ends)
                at += len(ends)
        else:
            used = [_used(piece, c) for piece in pieces]
            np.concatenate(used, out=column[: sum(len(u) for u in used)])


def joined(pieces: Sequence[Piece]) -> list[npt.NDArray[np.generic]]:
    """``pieces``' records as ten new arrays."""
    sizes = joined_nbytes(pieces)
    kinds = zip(sizes, COLUMN_KINDS, strict=True)
    out = [np.empty(size // np.dtype(kind).itemsize, dtype=kind) for size, kind in kinds]
    join_into(pieces, out)
    return out
