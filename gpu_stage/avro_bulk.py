"""Columnar Avro binary encoder: a whole batch of rows into one buffer plus row offsets.

Per-record encoders (fastavro included) walk the schema for every row. Here each column is encoded
for all rows at once (varints of integer columns and doubles in numpy, strings by one UTF-8 list
comprehension, union branches and small varints from precomputed tables), every value becoming one
small bytes object; the batch is then assembled row-major with a single ``b"".join`` and the row
offsets come from a numpy prefix sum of the per-column lengths. Large strings are thus copied once
after encoding. (A GPU encoder follows the same plan with a size pass, a prefix sum and a write pass.)

The output is byte-identical to ``fastavro.schemaless_writer(buf, schema, row)`` for every row (the
unit tests prove it with property tests). Supported schema subset (what :mod:`llmpipe.types` emits):
records, ``["null", T]`` unions, string, int, long (also ``timestamp-millis``), double, boolean,
arrays and maps, each written as one block followed by the zero terminator, as fastavro does.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from gpu_stage.avro_codegen import RowsEncoder, compile_rows_encoder
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


_SMALL = 1 << 13
_ZZ_SMALL: list[bytes] = [b""] * _SMALL
"""Varint bytes of non-negative ints below 8192 (string lengths, block counts), precomputed."""
for _v in range(_SMALL):
    _zz, _out = _v << 1, bytearray()
    while True:
        _out.append((_zz & 0x7F) | (0x80 if _zz > 0x7F else 0))
        _zz >>= 7
        if not _zz:
            break
    _ZZ_SMALL[_v] = bytes(_out)
NULL = b"\x00"
PRESENT = b"\x02"
TERMINATOR = b"\x00"


def length_prefix(n: int) -> bytes:
    """Varint of a non-negative length or count."""
    if n < _SMALL:
        return _ZZ_SMALL[n]
    part = zigzag_varints(np.array([n], dtype=np.int64))
    return part.buf.tobytes()


def split_part(part: Part) -> list[bytes]:
    """One bytes object per value of a part."""
    raw = part.buf.tobytes()
    offs = part.offsets.tolist()
    return [raw[a:b] for a, b in itertools.pairwise(offs)]


class Encoder(Protocol):
    """Encodes a column of non-null values of one Avro type, one bytes object per value.

    Per-value bytes objects let the batch be assembled with one ``b"".join`` at the end, so large
    strings are copied once after UTF-8 encoding instead of being scattered level by level.
    """

    def encode(self, values: Sequence[Any]) -> list[bytes]:
        """Encode ``values`` (none of them None)."""
        ...


class StringEncoder:
    """Avro string: varint byte length, then UTF-8 bytes."""

    def encode(self, values: Sequence[Any]) -> list[bytes]:
        """Encode a column of ``str``."""
        try:
            chunks = [s.encode("utf-8") for s in values]
        except (AttributeError, UnicodeEncodeError) as exc:
            msg = f"cannot encode string column: {exc}"
            raise SerializationError(msg) from exc
        return [length_prefix(len(c)) + c for c in chunks]


class LongEncoder:
    """Avro long / int (and timestamp-millis): zig-zag varints computed for the column in numpy."""

    def __init__(self, *, is_int: bool) -> None:
        """``is_int`` enforces the 32-bit range Avro ``int`` readers expect."""
        self._is_int = is_int

    def encode(self, values: Sequence[Any]) -> list[bytes]:
        """Encode a column of ints."""
        try:
            arr = np.array(values, dtype=np.int64)
        except (OverflowError, TypeError, ValueError) as exc:
            msg = f"cannot encode long column: {exc}"
            raise SerializationError(msg) from exc
        if self._is_int and len(arr) and (arr.min() < _INT32_MIN or arr.max() > _INT32_MAX):
            msg = "int column value outside the 32-bit range"
            raise SerializationError(msg)
        return split_part(zigzag_varints(arr))


class DoubleEncoder:
    """Avro double: 8 bytes, IEEE-754 little-endian."""

    def encode(self, values: Sequence[Any]) -> list[bytes]:
        """Encode a column of floats."""
        try:
            raw = np.array(values, dtype="<f8").tobytes()
        except (TypeError, ValueError) as exc:
            msg = f"cannot encode double column: {exc}"
            raise SerializationError(msg) from exc
        return [raw[i : i + 8] for i in range(0, len(raw), 8)]


class BooleanEncoder:
    """Avro boolean: one byte, 0 or 1."""

    def encode(self, values: Sequence[Any]) -> list[bytes]:
        """Encode a column of bools."""
        return [b"\x01" if v else b"\x00" for v in values]


class NullableEncoder:
    """``["null", T]``: branch index 0 (byte 0x00) for null, else 1 (byte 0x02) and the value."""

    def __init__(self, inner: Encoder) -> None:
        """Wrap the encoder of the non-null branch."""
        self._inner = inner

    def encode(self, values: Sequence[Any]) -> list[bytes]:
        """Encode a column whose values may be None."""
        present = [v for v in values if v is not None]
        if not present:
            return [NULL] * len(values)
        encoded = iter(self._inner.encode(present))
        return [NULL if v is None else PRESENT + next(encoded) for v in values]


def _blocks(counts: list[int], items: list[bytes]) -> list[bytes]:
    """Per value: count varint, its items, and a 0 terminator (an empty block is just 0)."""
    out = []
    start = 0
    for count in counts:
        if count:
            end = start + count
            out.append(b"".join((length_prefix(count), *items[start:end], TERMINATOR)))
            start = end
        else:
            out.append(TERMINATOR)
    return out


class ArrayEncoder:
    """Avro array written as one block: count, items, 0."""

    def __init__(self, items: Encoder) -> None:
        """Wrap the encoder of the (nullable) item type."""
        self._items = items

    def encode(self, values: Sequence[Any]) -> list[bytes]:
        """Encode a column of lists."""
        counts = [len(v) for v in values]
        items = self._items.encode(list(itertools.chain.from_iterable(values)))
        return _blocks(counts, items)


class MapEncoder:
    """Avro map written as one block: count, (key, value) pairs, 0."""

    def __init__(self, values: Encoder) -> None:
        """Wrap the encoder of the (nullable) value type."""
        self._values = values
        self._keys = StringEncoder()

    def encode(self, values: Sequence[Any]) -> list[bytes]:
        """Encode a column of dicts (entries in dict order, as fastavro writes them)."""
        counts = [len(m) for m in values]
        keys = self._keys.encode(list(itertools.chain.from_iterable(m.keys() for m in values)))
        vals = self._values.encode(list(itertools.chain.from_iterable(m.values() for m in values)))
        entries = [k + v for k, v in zip(keys, vals, strict=True)]
        return _blocks(counts, entries)


class RecordEncoder:
    """Avro record: its fields in schema order, missing fields written as null."""

    def __init__(self, fields: Sequence[tuple[str, Encoder]]) -> None:
        """Field names and encoders in schema order."""
        self.fields = tuple(fields)

    def encode(self, values: Sequence[Any]) -> list[bytes]:
        """Encode a column of mappings."""
        columns = {name: [v.get(name) for v in values] for name, _ in self.fields}
        return [b"".join(row) for row in zip(*self.field_columns(columns, len(values)), strict=True)]

    def field_columns(self, columns: Mapping[str, Sequence[Any]], n: int) -> list[list[bytes]]:
        """Encoded bytes per field (schema order) per row; an absent column means all null."""
        out = []
        for name, encoder in self.fields:
            column = columns.get(name)
            out.append(encoder.encode(column if column is not None else [None] * n))
        return out


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
    """Encodes batches of top-level records for one record schema.

    Rows are written by an encoder generated once per (schema, row layout)
    (:mod:`gpu_stage.avro_codegen`); the column-at-a-time encoders above remain the building blocks
    for callers that encode single columns.
    """

    def __init__(self, schema: Mapping[str, Any]) -> None:
        """``schema`` is the record schema (e.g. ``TypedRecord.avro``)."""
        self._schema = dict(schema)
        root = compile_schema(self._schema)
        if not isinstance(root, RecordEncoder):
            msg = "the top-level schema must be a record"
            raise SerializationError(msg)
        self._root = root
        self._row_encoders: dict[tuple[str, ...], RowsEncoder] = {}

    @property
    def field_names(self) -> tuple[str, ...]:
        """Top-level field names in schema order."""
        return tuple(name for name, _ in self._root.fields)

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
