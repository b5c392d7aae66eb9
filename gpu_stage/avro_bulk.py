"""Columnar Avro binary encoder: a whole batch of rows into one buffer plus row offsets.

Per-record encoders (fastavro included) pay Python overhead per field per row. Here every column is
encoded for all rows at once, and the columns are then interleaved row by row with numpy index
arithmetic: a size pass, a prefix sum and a scatter, the same plan a GPU kernel follows. Varints,
union branch bytes, doubles and block terminators are produced by numpy; strings are UTF-8 encoded
by one list comprehension and joined once.

The output is byte-identical to ``fastavro.schemaless_writer(buf, schema, row)`` for every row (the
unit tests prove it with property tests). Supported schema subset (what :mod:`llmpipe.types` emits):
records, ``["null", T]`` unions, string, int, long (also ``timestamp-millis``), double, boolean,
arrays and maps, each written as one block followed by the zero terminator, as fastavro does.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from llmpipe.errors import SerializationError

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_VARINT_MAX_BYTES = 10


@dataclass(frozen=True, slots=True)
class Part:
    """Encoded bytes of ``n`` values: value ``i`` is ``buf[offsets[i]:offsets[i + 1]]``."""

    buf: U8
    offsets: I64

    @property
    def lengths(self) -> I64:
        """Byte length of each value."""
        return np.diff(self.offsets)


def _offsets_from_lengths(lengths: I64) -> I64:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def zigzag_varints(values: I64) -> Part:
    """Avro ``long`` encoding (zig-zag, then little-endian base-128 varint) of a whole column."""
    v = np.asarray(values, dtype=np.int64)
    zz = ((v << np.int64(1)) ^ (v >> np.int64(63))).view(np.uint64)
    lengths = np.ones(len(zz), dtype=np.int64)
    for k in range(1, _VARINT_MAX_BYTES):
        lengths += zz >= (np.uint64(1) << np.uint64(7 * k))
    shifts = (np.arange(_VARINT_MAX_BYTES, dtype=np.uint64) * np.uint64(7))[None, :]
    groups = ((zz[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    positions = np.arange(_VARINT_MAX_BYTES)[None, :]
    more = positions < (lengths[:, None] - 1)
    groups |= (more * 0x80).astype(np.uint8)
    keep = positions < lengths[:, None]
    return Part(groups[keep], _offsets_from_lengths(lengths))


def interleave(parts: Sequence[Part], n: int) -> Part:
    """Concatenate, row by row, several encodings of the same ``n`` rows (fields of a record).

    Output row ``r`` is ``parts[0][r] + parts[1][r] + ...``. Each part's bytes are scattered to their
    destination with one vectorized index computation.
    """
    if len(parts) == 1:
        return parts[0]
    lengths = [p.lengths for p in parts]
    row_len = np.zeros(n, dtype=np.int64)
    for ln in lengths:
        row_len += ln
    offsets = _offsets_from_lengths(row_len)
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    dest = offsets[:-1].copy()
    for part, ln in zip(parts, lengths, strict=True):
        total = len(part.buf)
        if total == n and total and bool((ln == 1).all()):
            out[dest] = part.buf
        elif total:
            shift = np.repeat(dest - part.offsets[:-1], ln)
            out[np.arange(total, dtype=np.int64) + shift] = part.buf
        dest += ln
    return Part(out, offsets)


def _bytes_part(chunks: list[bytes]) -> Part:
    lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
    return Part(np.frombuffer(b"".join(chunks), dtype=np.uint8), _offsets_from_lengths(lengths))


class Encoder(Protocol):
    """Encodes a column of non-null values of one Avro type."""

    def encode(self, values: Sequence[Any]) -> Part:
        """Encode ``values`` (none of them None)."""
        ...


class StringEncoder:
    """Avro string: varint byte length, then UTF-8 bytes."""

    def encode(self, values: Sequence[Any]) -> Part:
        """Encode a column of ``str``."""
        try:
            chunks = [s.encode("utf-8") for s in values]
        except (AttributeError, UnicodeEncodeError) as exc:
            msg = f"cannot encode string column: {exc}"
            raise SerializationError(msg) from exc
        body = _bytes_part(chunks)
        return interleave([zigzag_varints(body.lengths), body], len(chunks))


class LongEncoder:
    """Avro long / int (and timestamp-millis): one zig-zag varint per value."""

    def __init__(self, *, is_int: bool) -> None:
        """``is_int`` enforces the 32-bit range Avro ``int`` readers expect."""
        self._is_int = is_int

    def encode(self, values: Sequence[Any]) -> Part:
        """Encode a column of ints."""
        try:
            arr = np.array(values, dtype=np.int64)
        except (OverflowError, TypeError, ValueError) as exc:
            msg = f"cannot encode long column: {exc}"
            raise SerializationError(msg) from exc
        if self._is_int and len(arr) and (arr.min() < _INT32_MIN or arr.max() > _INT32_MAX):
            msg = "int column value outside the 32-bit range"
            raise SerializationError(msg)
        return zigzag_varints(arr)


class DoubleEncoder:
    """Avro double: 8 bytes, IEEE-754 little-endian."""

    def encode(self, values: Sequence[Any]) -> Part:
        """Encode a column of floats."""
        try:
            arr = np.array(values, dtype="<f8")
        except (TypeError, ValueError) as exc:
            msg = f"cannot encode double column: {exc}"
            raise SerializationError(msg) from exc
        return Part(arr.view(np.uint8), np.arange(len(arr) + 1, dtype=np.int64) * 8)


class BooleanEncoder:
    """Avro boolean: one byte, 0 or 1."""

    def encode(self, values: Sequence[Any]) -> Part:
        """Encode a column of bools."""
        arr = np.fromiter((1 if v else 0 for v in values), dtype=np.uint8, count=len(values))
        return Part(arr, np.arange(len(arr) + 1, dtype=np.int64))


class NullableEncoder:
    """``["null", T]``: branch index 0 (byte 0x00) for null, else 1 (byte 0x02) and the value."""

    def __init__(self, inner: Encoder) -> None:
        """Wrap the encoder of the non-null branch."""
        self._inner = inner

    def encode(self, values: Sequence[Any]) -> Part:
        """Encode a column whose values may be None."""
        n = len(values)
        mask = np.fromiter((v is not None for v in values), dtype=bool, count=n)
        tags = Part(mask.astype(np.uint8) << np.uint8(1), np.arange(n + 1, dtype=np.int64))
        present = [v for v in values if v is not None]
        if not present:
            return tags
        inner = self._inner.encode(present)
        if len(present) == n:
            return interleave([tags, inner], n)
        lengths = np.zeros(n, dtype=np.int64)
        lengths[mask] = inner.lengths
        return interleave([tags, Part(inner.buf, _offsets_from_lengths(lengths))], n)


def _block_parts(counts: I64, items: Part) -> list[Part]:
    """Count varint, the items, and a 0 terminator after non-empty blocks (an empty one is just 0)."""
    item_starts = _offsets_from_lengths(counts)
    nonempty = (counts > 0).astype(np.int64)
    return [
        zigzag_varints(counts),
        Part(items.buf, items.offsets[item_starts]),
        Part(np.zeros(int(nonempty.sum()), dtype=np.uint8), _offsets_from_lengths(nonempty)),
    ]


class ArrayEncoder:
    """Avro array written as one block: count, items, 0."""

    def __init__(self, items: Encoder) -> None:
        """Wrap the encoder of the (nullable) item type."""
        self._items = items

    def encode(self, values: Sequence[Any]) -> Part:
        """Encode a column of lists."""
        n = len(values)
        counts = np.fromiter(map(len, values), dtype=np.int64, count=n)
        items = self._items.encode(list(itertools.chain.from_iterable(values)))
        return interleave(_block_parts(counts, items), n)


class MapEncoder:
    """Avro map written as one block: count, (key, value) pairs, 0."""

    def __init__(self, values: Encoder) -> None:
        """Wrap the encoder of the (nullable) value type."""
        self._values = values
        self._keys = StringEncoder()

    def encode(self, values: Sequence[Any]) -> Part:
        """Encode a column of dicts (entries in dict order, as fastavro writes them)."""
        n = len(values)
        counts = np.fromiter(map(len, values), dtype=np.int64, count=n)
        keys = list(itertools.chain.from_iterable(m.keys() for m in values))
        vals = list(itertools.chain.from_iterable(m.values() for m in values))
        entries = interleave([self._keys.encode(keys), self._values.encode(vals)], len(keys))
        return interleave(_block_parts(counts, entries), n)


class RecordEncoder:
    """Avro record: its fields in schema order, missing fields written as null."""

    def __init__(self, fields: Sequence[tuple[str, Encoder]]) -> None:
        """Field names and encoders in schema order."""
        self.fields = tuple(fields)

    def encode(self, values: Sequence[Any]) -> Part:
        """Encode a column of mappings."""
        columns = {name: [v.get(name) for v in values] for name, _ in self.fields}
        return self.encode_columns(columns, len(values))

    def encode_columns(self, columns: Mapping[str, Sequence[Any]], n: int) -> Part:
        """Encode ``n`` records given column-wise; an absent column means all null."""
        parts = []
        for name, encoder in self.fields:
            column = columns.get(name)
            parts.append(encoder.encode(column if column is not None else [None] * n))
        return interleave(parts, n)


_SCALARS: dict[str, Any] = {
    "string": StringEncoder,
    "double": DoubleEncoder,
    "boolean": BooleanEncoder,
}


def compile_schema(schema: Any) -> Encoder:
    """Build the encoder tree for an Avro schema (as JSON-like Python values)."""
    if isinstance(schema, list):
        if len(schema) == 2 and schema[0] == "null":
            return NullableEncoder(compile_schema(schema[1]))
        msg = f"unsupported union {schema!r}: only ['null', T]"
        raise SerializationError(msg)
    if isinstance(schema, str):
        if schema in ("long", "int"):
            return LongEncoder(is_int=schema == "int")
        if schema in _SCALARS:
            encoder: Encoder = _SCALARS[schema]()
            return encoder
        msg = f"unsupported Avro type {schema!r}"
        raise SerializationError(msg)
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "record":
            return RecordEncoder([(f["name"], compile_schema(f["type"])) for f in schema["fields"]])
        if kind == "array":
            return ArrayEncoder(compile_schema(schema["items"]))
        if kind == "map":
            return MapEncoder(compile_schema(schema["values"]))
        return compile_schema(kind)
    msg = f"unsupported Avro schema {schema!r}"
    raise SerializationError(msg)


class BulkEncoder:
    """Encodes batches of top-level records for one record schema."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        """``schema`` is the record schema (e.g. ``TypedRecord.avro``)."""
        root = compile_schema(dict(schema))
        if not isinstance(root, RecordEncoder):
            msg = "the top-level schema must be a record"
            raise SerializationError(msg)
        self._root = root

    @property
    def field_names(self) -> tuple[str, ...]:
        """Top-level field names in schema order."""
        return tuple(name for name, _ in self._root.fields)

    def encode_columns(self, columns: Mapping[str, Sequence[Any]], n: int) -> tuple[bytes, I64]:
        """Encode ``n`` rows given column-wise; returns the buffer and ``n + 1`` offsets."""
        part = self._root.encode_columns(columns, n)
        return part.buf.tobytes(), part.offsets

    def encode_rows(self, rows: Sequence[Mapping[str, Any]]) -> tuple[bytes, I64]:
        """Encode rows given as mappings (convenience for tests and small callers)."""
        part = self._root.encode(rows)
        return part.buf.tobytes(), part.offsets
