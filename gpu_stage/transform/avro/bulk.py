"""Avro binary encoder for whole batches: all rows into one buffer plus row offsets.

Per-record encoders (fastavro included) walk the schema for every row. Here the schema is walked once:
:mod:`gpu_stage.transform.avro.codegen` generates and compiles one encoder per (schema, row layout) that writes
every row straight into one ``bytearray`` with table-driven varints and pre-encoded union branches.
(A GPU encoder follows the same plan with a size pass, a prefix sum and a write pass.)

The output is byte-identical to ``fastavro.schemaless_writer(buf, schema, row)`` for every row (the
unit tests prove it with property tests). Supported schema subset (what :mod:`llmpipe.types` emits):
records, ``["null", T]`` unions, string, int, long (also ``timestamp-millis``), double, boolean,
arrays and maps, each written as one block followed by the zero terminator, as fastavro does.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.avro.codegen import RowsEncoder, compile_rows_encoder
from llmpipe.errors import SerializationError

I64 = npt.NDArray[np.int64]


class BulkEncoder:
    """Encodes batches of top-level records for one record schema.

    Rows are written by an encoder generated once per (schema, row layout)
    (:mod:`gpu_stage.transform.avro.codegen`), which also rejects schemas outside the supported subset.
    """

    def __init__(self, schema: Mapping[str, Any]) -> None:
        """``schema`` is the record schema (e.g. ``TypedRecord.avro``)."""
        self._schema = dict(schema)
        if self._schema.get("type") != "record":
            msg = "the top-level schema must be a record"
            raise SerializationError(msg)
        self._names = tuple(str(f["name"]) for f in self._schema["fields"])
        self._row_encoders: dict[tuple[str, ...], RowsEncoder] = {}
        self.rows_encoder(self._names)

    @property
    def field_names(self) -> tuple[str, ...]:
        """Top-level field names in schema order."""
        return self._names

    def rows_encoder(self, layout: Sequence[str]) -> RowsEncoder:
        """The generated encoder for row tuples holding the fields ``layout`` names, in that order."""
        key = tuple(layout)
        encoder = self._row_encoders.get(key)
        if encoder is None:
            encoder = compile_rows_encoder(self._schema, key)
            self._row_encoders[key] = encoder
        return encoder

    def encode_tuples(self, rows: Iterable[Sequence[Any]], layout: Sequence[str]) -> tuple[bytes, I64]:
        """Encode row tuples laid out as ``layout`` (fields not named are null); buffer and offsets."""
        out, ends = self.rows_encoder(layout)(rows)
        offsets = np.empty(len(ends) + 1, dtype=np.int64)
        offsets[0] = 0
        offsets[1:] = ends
        return bytes(out), offsets

    def encode_columns(self, columns: Mapping[str, Sequence[Any]], n: int) -> tuple[bytes, I64]:
        """Encode ``n`` rows given column-wise; returns the buffer and ``n + 1`` offsets."""
        if n == 0:
            return b"", np.zeros(1, dtype=np.int64)
        layout = tuple(name for name in self.field_names if columns.get(name) is not None)
        if not layout:
            return self.encode_tuples(itertools.repeat((), n), layout)
        return self.encode_tuples(zip(*(columns[name] for name in layout), strict=True), layout)

    def encode_rows(self, rows: Sequence[Mapping[str, Any]]) -> tuple[bytes, I64]:
        """Encode rows given as mappings (convenience for tests and small callers)."""
        names = self.field_names
        return self.encode_tuples(([r.get(name) for name in names] for r in rows), names)
