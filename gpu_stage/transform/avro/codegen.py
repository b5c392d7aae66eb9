"""Row-wise Avro encoder generated once per schema: Python source compiled from the schema.

Walking an encoder tree (or building one small bytes object per value and joining them) costs more
than the encoding itself. Here the schema is turned once into straight-line Python that writes one
row tuple into a shared ``bytearray``: union branch bytes are fused with the varint that follows
them, small integers and lengths come from precomputed tables, each string is UTF-8 encoded once, and
only values outside the tables take a slow, range-checked path. Row ends are recorded as it goes.

The output is byte-identical to ``fastavro.schemaless_writer`` (same subset as
:mod:`gpu_stage.transform.avro.bulk`: records, ``["null", T]`` unions, string, int, long, double, boolean,
arrays and maps written as one block plus the zero terminator).
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from llmpipe.errors import SerializationError

RowsEncoder = Callable[[Iterable[Sequence[Any]]], tuple[bytearray, list[int]]]
"""Encodes rows (tuples in a fixed field layout) into one buffer and the end offset of each row."""

SMALL = 1 << 13
"""Integers in ``[-SMALL, SMALL)`` and lengths below ``SMALL`` are encoded by table lookup."""

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_BRANCH = b"\x02"
_NULL = b"\x00"
_EMPTY_BLOCK = {False: b"\x00", True: b"\x02\x00"}
_ENCODE_ERRORS = (AttributeError, TypeError, OverflowError, UnicodeEncodeError, struct.error)
"""What a value of the wrong type or range raises inside generated code (re-raised as ours)."""


def varint(zz: int) -> bytes:
    """Little-endian base-128 varint of a non-negative (already zig-zagged) integer."""
    out = bytearray()
    while zz > 0x7F:
        out.append((zz & 0x7F) | 0x80)
        zz >>= 7
    out.append(zz)
    return bytes(out)


def long_bytes(value: Any, lo: int, hi: int) -> bytes:
    """Zig-zag varint of an integer outside the lookup table, checked against ``[lo, hi]``.

    Timestamps and offsets are large but close together within a batch, so the varint is built as
    the two low 7-bit groups (a table) plus the varint of the high part (memoized; neighbours share it).
    """
    v = value if type(value) is int else operator.index(value)
    if not lo <= v <= hi:
        msg = f"integer {v} outside the Avro range [{lo}, {hi}]"
        raise SerializationError(msg)
    zz = (v << 1) ^ (v >> 63)
    if zz < _LOW:
        return _V14[zz]
    high = zz >> 14
    rest = _HIGH.get(high)
    if rest is None:
        if len(_HIGH) >= _HIGH_MAX:
            _HIGH.clear()
        rest = _HIGH[high] = varint(high)
    return _C14[zz & (_LOW - 1)] + rest


_LOW = 1 << 14
_V14 = [varint(zz) for zz in range(_LOW)]
_C14 = [bytes(((zz & 0x7F) | 0x80, (zz >> 7) | 0x80)) for zz in range(_LOW)]
"""The two low 7-bit groups of a varint that continues past them."""
_HIGH: dict[int, bytes] = {}
_HIGH_MAX = 1 << 12


def length_bytes(n: int) -> bytes:
    """Varint of a length or count (zig-zag of a non-negative ``n`` is ``2 * n``)."""
    return varint(n << 1)


_LEN = [length_bytes(n) for n in range(SMALL)]
_PLEN = [_BRANCH + b for b in _LEN]
_LONG = {v: varint((v << 1) ^ (v >> 63)) for v in range(-SMALL, SMALL)}
_PLONG = {v: _BRANCH + b for v, b in _LONG.items()}


class _Source:
    """Lines of the generated function, with fresh variable names for nested values."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._counter = 0

    def fresh(self, stem: str) -> str:
        self._counter += 1
        return f"{stem}{self._counter}"

    def add(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)


def _is_nullable(schema: Any) -> bool:
    return isinstance(schema, list)


def _unwrap(schema: Any) -> Any:
    """The named type a schema denotes: ``{"type": "long", "logicalType": ...}`` is ``long``."""
    if isinstance(schema, dict) and schema.get("type") not in ("record", "array", "map"):
        return _unwrap(schema["type"])
    return schema


def _emit(src: _Source, schema: Any, var: str, depth: int) -> None:
    """Code writing the value in ``var`` (of type ``schema``, possibly a nullable union)."""
    if isinstance(schema, list):
        if len(schema) != 2 or schema[0] != "null":
            msg = f"unsupported union {schema!r}: only ['null', T]"
            raise SerializationError(msg)
        src.add(depth, f"if {var} is None:")
        src.add(depth + 1, "a(0)")
        src.add(depth, "else:")
        _emit_value(src, schema[1], var, depth + 1, branch=True)
    else:
        _emit_value(src, schema, var, depth, branch=False)


def _emit_length(src: _Source, n: str, depth: int, *, branch: bool) -> None:
    table = "PLEN" if branch else "LEN"
    slow = "BRANCH + length_bytes" if branch else "length_bytes"
    src.add(depth, f"out += {table}[{n}] if {n} < SMALL else {slow}({n})")


def _emit_value(src: _Source, schema: Any, var: str, depth: int, *, branch: bool) -> None:
    """Code writing a non-null value, preceded by the union branch byte when ``branch``."""
    schema = _unwrap(schema)
    if schema == "string":
        b, n = src.fresh("b"), src.fresh("n")
        src.add(depth, f"{b} = {var}.encode()")
        src.add(depth, f"{n} = len({b})")
        _emit_length(src, n, depth, branch=branch)
        src.add(depth, f"out += {b}")
    elif schema in ("int", "long"):
        lo, hi = _INT32 if schema == "int" else _INT64
        b = src.fresh("b")
        src.add(depth, f"{b} = {'PLONG' if branch else 'LONG'}.get({var})")
        src.add(depth, f"if {b} is None:")
        if branch:
            src.add(depth + 1, "a(2)")
        src.add(depth + 1, f"{b} = long_bytes({var}, {lo}, {hi})")
        src.add(depth, f"out += {b}")
    elif schema == "double":
        src.add(depth, f"out += {'pack_bd(2, ' if branch else 'pack_d('}{var})")
    elif schema == "boolean":
        t, f = (b"\x02\x01", b"\x02\x00") if branch else (b"\x01", b"\x00")
        src.add(depth, f"out += {t!r} if {var} else {f!r}")
    elif isinstance(schema, dict) and schema["type"] == "record":
        if branch:
            src.add(depth, "a(2)")
        for field in schema["fields"]:
            fv = src.fresh("v")
            src.add(depth, f"{fv} = {var}.get({field['name']!r})")
            _emit(src, field["type"], fv, depth)
    elif isinstance(schema, dict) and schema["type"] in ("array", "map"):
        _emit_block(src, schema, var, depth, branch=branch)
    else:
        msg = f"unsupported Avro type {schema!r}"
        raise SerializationError(msg)


def _emit_block(src: _Source, schema: dict[str, Any], var: str, depth: int, *, branch: bool) -> None:
    """An array or map as one block: count, items (map: key then value), and the zero terminator."""
    n = src.fresh("n")
    src.add(depth, f"{n} = len({var})")
    src.add(depth, f"if {n}:")
    _emit_length(src, n, depth + 1, branch=branch)
    if schema["type"] == "array":
        item = src.fresh("x")
        src.add(depth + 1, f"for {item} in {var}:")
        _emit(src, schema["items"], item, depth + 2)
    else:
        key, item = src.fresh("k"), src.fresh("x")
        src.add(depth + 1, f"for {key}, {item} in {var}.items():")
        _emit_value(src, "string", key, depth + 2, branch=False)
        _emit(src, schema["values"], item, depth + 2)
    src.add(depth + 1, "a(0)")
    src.add(depth, "else:")
    src.add(depth + 1, f"out += {_EMPTY_BLOCK[branch]!r}")


def _emit_fields(src: _Source, fields: Sequence[dict[str, Any]], layout: Sequence[str], depth: int) -> None:
    """Top-level fields in schema order; a field not in ``layout`` is null (runs of them fused)."""
    index = {name: i for i, name in enumerate(layout)}
    nulls = 0
    for field in fields:
        position = index.get(field["name"])
        if position is None and _is_nullable(field["type"]):
            nulls += 1
            continue
        if nulls:
            src.add(depth, f"out += {_NULL * nulls!r}")
            nulls = 0
        _emit(src, field["type"], "None" if position is None else f"f{position}", depth)
    if nulls:
        src.add(depth, f"out += {_NULL * nulls!r}")


def _source(schema: dict[str, Any], layout: Sequence[str]) -> str:
    src = _Source()
    src.add(0, "def encode(rows):")
    src.add(1, "out = bytearray()")
    src.add(1, "a = out.append")
    src.add(1, "ends = []")
    src.add(1, "end = ends.append")
    src.add(1, "for row in rows:")
    if layout:
        src.add(2, f"{''.join(f'f{i}, ' for i in range(len(layout)))}= row")
    _emit_fields(src, schema["fields"], layout, 2)
    src.add(2, "end(len(out))")
    src.add(1, "return out, ends")
    return "\n".join(src.lines) + "\n"


def _guarded(inner: Callable[[Iterable[Sequence[Any]]], tuple[bytearray, list[int]]]) -> RowsEncoder:
    """Wrong-typed values surface as :class:`SerializationError`, as from the columnar encoder."""

    def encode(rows: Iterable[Sequence[Any]]) -> tuple[bytearray, list[int]]:
        try:
            return inner(rows)
        except _ENCODE_ERRORS as exc:
            msg = f"cannot encode row: {exc}"
            raise SerializationError(msg) from exc

    return encode


def compile_rows_encoder(schema: dict[str, Any], layout: Sequence[str]) -> RowsEncoder:
    """Generate and compile the encoder of ``schema`` (a record) for rows laid out as ``layout``.

    Row tuples hold the top-level fields named in ``layout``, in that order; the other fields are
    written as null. Nested records are mappings read with ``.get``, as fastavro reads them.
    """
    if schema.get("type") != "record":
        msg = "the top-level schema must be a record"
        raise SerializationError(msg)
    unknown = set(layout) - {f["name"] for f in schema["fields"]}
    if unknown:
        msg = f"layout names fields not in the schema: {sorted(unknown)}"
        raise SerializationError(msg)
    namespace: dict[str, Any] = {
        "LEN": _LEN,
        "PLEN": _PLEN,
        "LONG": _LONG,
        "PLONG": _PLONG,
        "SMALL": SMALL,
        "BRANCH": _BRANCH,
        "length_bytes": length_bytes,
        "long_bytes": long_bytes,
        "pack_d": struct.Struct("<d").pack,
        "pack_bd": struct.Struct("<Bd").pack,
    }
    code = compile(_source(schema, layout), f"<avro encoder {schema.get('name', '')}>", "exec")
    exec(code, namespace)
    inner: Callable[[Iterable[Sequence[Any]]], tuple[bytearray, list[int]]] = namespace["encode"]
    return _guarded(inner)
