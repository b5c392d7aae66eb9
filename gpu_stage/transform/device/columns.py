"""A batch as the device lane's input: values back to back, and the record columns packed for the device."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.batch import RawBatch
from llmpipe.packed import last_end

log = logging.getLogger(__name__)

I64 = npt.NDArray[np.int64]


@dataclass
class LaneInput:
    """One batch as the lane reads it (host arrays).

    The values lie in page-locked memory; the keys and headers are packed as :mod:`gpu_stage.transform.packed`
    packs them (the lane reads ``request_id``, ``latency_ms`` and ``attributes`` from them on the
    device), and ``pinned`` names those of them that are page-locked too. ``block``, when set, is
    one page-locked buffer that holds the values and every other column (a batch packed into an
    input buffer): a device can take the whole batch in one copy (see :meth:`block_layout`).
    """

    values: npt.NDArray[np.uint8]
    value_ends: I64
    keys: npt.NDArray[np.uint8]
    key_ends: I64
    key_null: npt.NDArray[np.uint8]
    headers: npt.NDArray[np.uint8]
    header_ends: I64
    partitions: I64
    offsets: I64
    timestamps: I64
    pinned: frozenset[str] = frozenset()
    block: npt.NDArray[np.uint8] | None = None

    @classmethod
    def of(
        cls, core: Any, batch: RawBatch, staging: Callable[[int], npt.NDArray[np.uint8]], columns: tuple[I64, I64, I64]
    ) -> LaneInput:
        """Pack a batch with the native core: the values go into ``staging(size)``, a reused host buffer.

        The native core sums the values' sizes as it packs (one pass over the scattered ``bytes``
        objects, not two); the buffer grows and the call repeats only when that sum exceeds it. The
        keys and the two headers the transform reads are packed alongside. ``columns`` are the
        batch's partitions, offsets and timestamps as int64 arrays.
        """
        lists = (list(batch.values), list(batch.keys), list(batch.headers))
        buffer = staging(1)
        packed = core.lane_input(*lists, buffer)
        if isinstance(packed, int):
            buffer = staging(packed + 1)
            packed = core.lane_input(*lists, buffer)
        value_ends, keys, key_ends, key_null, headers, header_ends = packed
        ends = np.frombuffer(value_ends, dtype=np.int64)
        total = last_end(ends)
        return cls(
            buffer[: max(total, 1)],
            ends,
            _bytes_array(keys),
            np.frombuffer(key_ends, dtype=np.int64),
            np.frombuffer(key_null, dtype=np.uint8),
            _bytes_array(headers),
            np.frombuffer(header_ends, dtype=np.int64),
            *columns,
        )

    def columns(self) -> dict[str, npt.NDArray[Any]]:
        """Every column but the values, by name, as the kernels read them (an empty buffer as one byte: never read)."""
        return {
            "value_ends": self.value_ends,
            "keys": _nonempty(self.keys),
            "key_ends": self.key_ends,
            "key_null": self.key_null,
            "headers": _nonempty(self.headers),
            "header_ends": self.header_ends,
            "partitions": self.partitions,
            "offsets": self.offsets,
            "timestamps": self.timestamps,
        }

    def record_columns(self) -> tuple[npt.NDArray[Any], ...]:
        """The keys and headers as the kernels take them (see :data:`RECORD_COLUMNS`)."""
        columns = self.columns()
        return tuple(columns[name] for name in RECORD_COLUMNS)

    def block_layout(self) -> tuple[int, dict[str, tuple[int, npt.NDArray[Any]]]] | None:
        """Where the values and each column lie in :attr:`block`: (bytes to copy, name -> (offset, column)).

        None without a block, or when a column lies outside it or off its item size's alignment
        (a device reads an int64 column only at an 8-byte boundary). An empty column is given
        offset 0: the kernels never read it.
        """
        if self.block is None:
            return None
        start = self.block.__array_interface__["data"][0]
        size = self.block.nbytes
        layout: dict[str, tuple[int, npt.NDArray[Any]]] = {}
        span = 0
        columns = {"values": self.values, **self.columns(), "keys": self.keys, "headers": self.headers}
        for name, column in columns.items():
            if not column.nbytes:  # as columns() gives it: one byte, never read
                layout[name] = (0, self.block[:1])
                continue
            at = column.__array_interface__["data"][0] - start
            if at < 0 or at + column.nbytes > size or at % column.dtype.itemsize:
                return None
            layout[name] = (at, column)
            span = max(span, at + column.nbytes)
        return max(span, 1), layout


# The kernels' arguments after the values' ends, in order.
RECORD_COLUMNS = ("keys", "key_ends", "key_null", "headers", "header_ends")


def _bytes_array(raw: bytes) -> npt.NDArray[np.uint8]:
    return np.frombuffer(raw, dtype=np.uint8)


def _nonempty(buf: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    return buf if len(buf) else np.zeros(1, dtype=np.uint8)
