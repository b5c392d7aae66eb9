"""The device lane: raw bodies → Avro datums with one thread per body, for CUDA or (in tests) the CPU.

The row functions (:mod:`gpu_stage.transform.device.scan`, :mod:`gpu_stage.transform.device.rows`) are
compiled per target by executing their source with that target's decorators, so CUDA and the CPU
run the same code and the CPU run is what the tests compare, byte for byte, with the native core.

Per batch (:meth:`Lane.run`): the native core packs the values into one buffer and pre-encodes the
columns that come from the record rather than the body (``request_id``, ``latency_ms`` +
``attributes``); pass 1 walks every body and returns its encoded size or -1; the host turns the sizes
into offsets (a prefix sum over ``n`` integers); pass 2 writes every taken row's datum into one
buffer, which comes back in one copy. Pass 1 also finds the dead letters whose text is a constant
(upstream error bodies; bodies not UTF-8, not JSON or not an object), which the host makes from their
codes. Bodies the lane does not take (the other dead letters, rare shapes) are transformed
by the native core, and the two results are merged in batch order.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import logging
import math
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, overload

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.api import dead_letter
from gpu_stage.transform.batch import EncodedRows, ParseResult, RawBatch
from gpu_stage.transform.contract.extract import UPSTREAM_ERROR_TEXT
from gpu_stage.transform.contract.reference import INVALID_JSON_TEXT, INVALID_UTF8_TEXT, NOT_AN_OBJECT_TEXT
from gpu_stage.transform.device import rows as rows_mod
from gpu_stage.transform.packed import Found, PackedBatch, last_end, merge_found
from gpu_stage.transform.stages import StageClock
from llmpipe.dlq import Reason
from llmpipe.errors import ConfigError
from llmpipe.record import TypedRecord

log = logging.getLogger(__name__)

I64 = npt.NDArray[np.int64]
_HERE = Path(__file__).parent
_SOURCES = ("scan.py", "record.py", "rows.py")
_KINDS = {"string": 0, "number": 1, "integer": 2, "boolean": 3}
_MAX_PROPS = 62
_EXACT = 2**53
_I64 = (-(2**63), 2**63 - 1)
# The record layout :func:`gpu_stage.transform.device.rows.emit` writes, checked against the schema.
FIELDS = (
    "request_id",
    "completion_id",
    "object",
    "created",
    "model",
    "finish_reason",
    "stop_reason",
    "content_text",
    "reasoning",
    "tool_name",
    "tool_arguments",
    "tool_arguments_valid",
    "num_choices",
    "choices",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cached_tokens",
    "latency_ms",
    "attributes",
    "system_fingerprint",
    "service_tier",
    "metadata",
    "extra",
    "content",
    "content_valid",
    "content_error",
    "raw_partition",
    "raw_offset",
    "ingest_ts",
)


@functools.cache
def compile_lane(target: str, cache: Path | None = None) -> SimpleNamespace:
    """The lane's functions compiled for ``"cpu"`` (numba.njit) or ``"cuda"`` (numba.cuda), once per process.

    numba compiles each function on its first call; the content schema is data (:class:`ContentTables`),
    so one compilation serves every schema. With ``cache`` the compiled code is kept on disk between
    processes (a worker then starts in about a second instead of tens): see :func:`_cached_namespace`.
    """
    if target not in ("cpu", "cuda"):
        msg = f"unknown lane target {target!r}"
        raise ConfigError(msg)
    if cache is not None:
        try:
            return _compile(target, _cached_namespace(target, cache))
        except Exception as exc:  # an unwritable folder, a numba without caching: compile as before
            log.warning("device lane kernels not cached in %s: %s", cache, exc)
    return _compile(target, {"__name__": f"gpu_stage.transform.device.compiled_{target}"})


def _compile(target: str, ns: dict[str, Any]) -> SimpleNamespace:
    """Execute the lane's sources into ``ns`` with ``target``'s decorators (cached ones when ``ns`` says so)."""
    folder = ns.get("_cache")
    with _numba_cache_dir(folder):
        if target == "cpu":
            import numba

            plain: Callable[..., Any] = numba.njit(cache=folder is not None)
            ns.update(jit=plain, kernel=plain)
            ns["lane_start"] = plain(_zero)
            ns["lane_step"] = plain(_one)
        else:
            cuda: Any = importlib.import_module("numba.cuda")
            # Kernels are cached whole (their device functions are compiled into them).
            ns.update(jit=cuda.jit(device=True), kernel=cuda.jit(cache=True) if folder is not None else cuda.jit)
            exec(_GRID_SOURCE, ns)
            ns["lane_start"] = cuda.jit(device=True)(ns["lane_start"])
            ns["lane_step"] = cuda.jit(device=True)(ns["lane_step"])
        for source in _SOURCES:
            path = _HERE / source
            exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), ns)
    return SimpleNamespace(**ns)


def _cached_namespace(target: str, cache: Path) -> dict[str, Any]:
    """A fresh module for the lane's functions, registered under a name keyed by everything they compile from.

    numba keys a cached function by its source file's time stamp only, but a lane kernel compiles
    in functions of other files: so each version of the lane's sources (and of numba, Python and
    the target) gets a folder of its own. The functions must belong to an importable module for
    numba to store and load them, hence the entry in ``sys.modules``.
    """
    import numba

    digest = hashlib.sha256()
    for part in (target, numba.__version__, sys.version, *(_HERE / s for s in (*_SOURCES, "lane.py"))):
        digest.update(part.read_bytes() if isinstance(part, Path) else str(part).encode())
    key = digest.hexdigest()[:16]
    folder = cache / f"lane-{target}-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"gpu_stage.transform.device._compiled_{target}_{key}"
    module = sys.modules.get(name) or types.ModuleType(name)
    sys.modules[name] = module
    module.__dict__.update(_cache=folder)
    return module.__dict__


@contextmanager
def _numba_cache_dir(folder: Path | None) -> Iterator[None]:
    """Numba's cache folder while the lane's functions are defined (each takes it from the config then)."""
    if folder is None:
        yield
        return
    config: Any = importlib.import_module("numba.core.config")  # its settings are set at run time, untyped
    before = config.CACHE_DIR
    config.CACHE_DIR = str(folder)
    try:
        yield
    finally:
        config.CACHE_DIR = before


def _zero() -> int:
    return 0


def _one() -> int:
    return 1


# The first row and the row stride of a grid-stride loop; ``cuda`` must be a global of the functions.
_GRID_SOURCE = """
from numba import cuda


def lane_start():
    return cuda.grid(1)


def lane_step():
    return cuda.gridsize(1)
"""


@dataclass(frozen=True)
class ContentTables:
    """The content JSON Schema as the arrays the lane reads (see ``P_*`` in ``lane_rows``)."""

    ptab: I64
    pnames: npt.NDArray[np.uint8]
    pends: I64
    nprops: int
    required: int
    closed: bool
    pmin: npt.NDArray[np.float64]
    pmax: npt.NDArray[np.float64]
    enames: npt.NDArray[np.uint8]
    eends: I64

    @classmethod
    def of(cls, schema: Mapping[str, Any]) -> ContentTables:
        """Compile the supported subset; checks the lane cannot do exactly mark a property ``F_SLOW``."""
        props: dict[str, Any] = dict(schema.get("properties") or {})
        names = list(props)
        if len(names) > _MAX_PROPS:
            msg = f"the device lane supports at most {_MAX_PROPS} content properties, not {len(names)}"
            raise ConfigError(msg)
        ptab = np.zeros((max(len(names), 1), rows_mod.PTAB_COLS), dtype=np.int64)
        pmin = np.zeros(max(len(names), 1), dtype=np.float64)
        pmax = np.zeros(max(len(names), 1), dtype=np.float64)
        enum_values: list[bytes] = []
        for j, name in enumerate(names):
            enum_values += _property_row(props[name], ptab[j], pmin, pmax, j, len(enum_values))
        ptab[:, rows_mod.P_REQUIRED] = -1
        required = 0
        for rank, name in enumerate(schema.get("required") or []):
            if name not in props:  # always missing: the native core writes that error
                required = -1
                break
            j = names.index(name)
            required |= 1 << j
            if ptab[j, rows_mod.P_REQUIRED] < 0:
                ptab[j, rows_mod.P_REQUIRED] = rank
        pnames, pends = _packed([n.encode() for n in names])
        enames, eends = _packed(enum_values)
        closed = schema.get("additionalProperties") is False
        return cls(ptab, pnames, pends, len(names), required, closed, pmin, pmax, enames, eends)

    def args(self) -> tuple[Any, ...]:
        """In the order ``measure_row`` takes them after ``r``."""
        return (
            self.ptab,
            self.pnames,
            self.pends,
            self.nprops,
            self.required,
            self.closed,
            self.pmin,
            self.pmax,
            self.enames,
            self.eends,
        )


def _packed(items: list[bytes]) -> tuple[npt.NDArray[np.uint8], I64]:
    data = np.frombuffer(b"".join(items) or b"\0", dtype=np.uint8).copy()
    ends = np.cumsum([len(i) for i in items] or [0]).astype(np.int64)
    return data, ends


def _property_row(prop: Mapping[str, Any], row: I64, pmin: Any, pmax: Any, j: int, enum_first: int) -> list[bytes]:
    """Fill ``row`` (one ``ptab`` row) for one property; the string enum values it adds."""
    r = rows_mod
    array = prop.get("type") == "array"
    kind = _KINDS[str((prop.get("items") or {}).get("type") if array else prop.get("type"))]
    row[r.P_KIND], row[r.P_ARRAY] = kind, int(array)
    row[r.P_ENUM_FIRST] = row[r.P_ENUM_LAST] = enum_first
    if array:
        return []
    flags = 0
    for key, flag, int_flag, slot, bounds in (
        ("minimum", r.F_MIN, r.F_MIN_INT, r.P_MIN_I, pmin),
        ("maximum", r.F_MAX, r.F_MAX_INT, r.P_MAX_I, pmax),
    ):
        if key in prop:
            flags |= flag | _bound(prop[key], kind, row, slot, bounds, j, int_flag)
    values: list[bytes] = []
    if "enum" in prop:
        if kind != 0:
            flags |= r.F_SLOW
        else:
            flags |= r.F_ENUM
            values = [v.encode() for v in prop["enum"] if isinstance(v, str)]
            row[r.P_ENUM_LAST] = enum_first + len(values)
    row[r.P_FLAGS] = flags
    return values


def _bound(value: Any, kind: int, row: I64, slot: int, bounds: Any, j: int, int_flag: int) -> int:
    """Store one minimum/maximum; the flags it adds (an inexact comparison makes the property slow)."""
    if isinstance(value, bool | int):
        if kind == 2 and _I64[0] <= value <= _I64[1]:
            row[slot] = int(value)
            return int_flag
        if abs(value) < _EXACT:
            bounds[j] = float(value)
            return 0
        return rows_mod.F_SLOW
    if isinstance(value, float) and math.isfinite(value):
        bounds[j] = value
        return 0
    return rows_mod.F_SLOW


def check_layout(record: TypedRecord) -> None:
    """Refuse a record schema whose layout differs from what the lane writes (a ConfigError)."""
    names = tuple(f["name"] for f in record.avro["fields"])
    content = next(f for f in record.avro["fields"] if f["name"] == "content")["type"][1]
    content_names = [f["name"] for f in content["fields"]]
    if names != FIELDS or content_names != list(record.content_schema.get("properties") or {}):
        msg = "the device lane does not write this record layout: " + json.dumps(names)
        raise ConfigError(msg)


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


def starts_of(sizes: I64) -> tuple[I64, I64, I64]:
    """Each taken row's offset (-1 where not taken), the taken positions, and the taken rows' offsets."""
    taken = np.flatnonzero(sizes >= 0)
    kept = sizes[taken]
    offsets = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum(kept, out=offsets[1:])
    starts = np.full(len(sizes), -1, dtype=np.int64)
    starts[taken] = offsets[:-1]
    return starts, taken, offsets


def merge(batch: RawBatch, fast: EncodedRows, slow: EncodedRows) -> EncodedRows:
    """Both results' rows in batch order, copied once into one ``bytes`` (one slice per run of adjacent rows).

    ``fast.buf`` may be any buffer (the lane's page-locked output, reused by the next batch): the
    result never refers to it.
    """
    if len(slow) == 0 or len(fast) == 0:
        rows = fast if len(slow) == 0 else slow
        return EncodedRows(bytes(rows.buf), rows.offsets, rows.rows, [batch.keys[i] for i in rows.rows.tolist()])
    positions = np.concatenate([fast.rows, slow.rows])
    order = np.argsort(positions, kind="stable")
    lengths = np.concatenate([np.diff(fast.offsets), np.diff(slow.offsets)])[order]
    starts = np.concatenate([fast.offsets[:-1], slow.offsets[:-1]])[order]
    source = (order >= len(fast)).astype(np.int8)
    ends = starts + lengths
    breaks = np.flatnonzero((starts[1:] != ends[:-1]) | (source[1:] != source[:-1])) + 1
    firsts = np.concatenate([[0], breaks]).tolist()
    lasts = np.concatenate([breaks - 1, [len(order) - 1]]).tolist()
    views = (memoryview(fast.buf).cast("B"), memoryview(slow.buf))
    src, st, en = source.tolist(), starts.tolist(), ends.tolist()
    buf = b"".join(views[src[i]][st[i] : en[j]] for i, j in zip(firsts, lasts, strict=True))
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    merged = positions[order]
    return EncodedRows(buf, offsets, merged, [batch.keys[i] for i in merged.tolist()])


def int_columns(batch: RawBatch) -> tuple[I64, I64, I64]:
    """The batch's partitions, offsets and timestamps as contiguous int64 arrays (converted once)."""
    columns = (batch.partitions, batch.offsets, batch.timestamps_ms)
    return tuple(np.ascontiguousarray(c, dtype=np.int64) for c in columns)  # type: ignore[return-value]


def sub_batch(batch: RawBatch, positions: I64, columns: tuple[I64, I64, I64] | None = None) -> RawBatch:
    """The records at ``positions`` as a batch of their own (for the native core)."""
    partitions, offsets, timestamps = columns or int_columns(batch)
    picks = positions.tolist()
    return RawBatch(
        values=[batch.values[i] for i in picks],
        keys=[batch.keys[i] for i in picks],
        headers=[batch.headers[i] for i in picks],
        topic=batch.topic,
        partitions=partitions[positions],
        offsets=offsets[positions],
        timestamps_ms=timestamps[positions],
    )


def combine(
    batch: RawBatch,
    fast: EncodedRows,
    rest: tuple[EncodedRows, Found],
    rest_positions: I64,
    lanes: LaneFound,
    stage: str,
) -> ParseResult:
    """The lane's rows and dead letters plus the native core's for the bodies the lane left, in batch order.

    ``rest`` is the native core's result on the sub-batch of ``rest_positions``; ``lanes`` are the
    dead letters the lane found.
    """
    slow, found = rest
    slow_rows = EncodedRows(slow.buf, slow.offsets, rest_positions[slow.rows], [])
    at = rest_positions.tolist()
    dead = merge_found([(at[i], reason, text) for i, reason, text in found], lanes)
    bad = [dead_letter(batch, i, stage, Reason(reason), text) for i, reason, text in dead]
    return ParseResult(merge(batch, fast, slow_rows), bad)


class LaneFound(Sequence[tuple[int, str, str]]):
    """The dead letters pass 1 found, as the native core reports them: ``(position, reason, text)``.

    Pass 1 gives each a code in place of a size (``lane_rows.UPSTREAM_ERROR`` and below), and its
    text is a constant. Each tuple is made when read: a packed batch's dead letters are only counted
    on the hot path (:class:`~gpu_stage.transform.packed.DeadLetters` makes them when read), so a tuple per
    dead letter there would be wasted work.
    """

    _BY_CODE: ClassVar[dict[int, tuple[str, str]]] = {
        rows_mod.UPSTREAM_ERROR: (Reason.UPSTREAM_ERROR.value, UPSTREAM_ERROR_TEXT),
        rows_mod.NOT_AN_OBJECT: (Reason.NOT_AN_OBJECT.value, NOT_AN_OBJECT_TEXT),
        rows_mod.INVALID_JSON: (Reason.INVALID_JSON.value, INVALID_JSON_TEXT),
        rows_mod.INVALID_UTF8: (Reason.INVALID_UTF8.value, INVALID_UTF8_TEXT),
    }

    def __init__(self, positions: I64, codes: I64) -> None:
        """``positions``: the dead letters' batch positions, ascending; ``codes``: pass 1's code for each."""
        self._positions = positions
        self._codes = codes

    @classmethod
    def of(cls, sizes: I64) -> LaneFound:
        """The dead letters among pass 1's ``sizes``."""
        positions = np.flatnonzero(sizes <= rows_mod.UPSTREAM_ERROR)
        return cls(positions, sizes[positions])

    def __len__(self) -> int:
        return len(self._positions)

    def __iter__(self) -> Iterator[tuple[int, str, str]]:
        by_code = self._BY_CODE
        return ((i, *by_code[code]) for i, code in zip(self._positions.tolist(), self._codes.tolist(), strict=True))

    @overload
    def __getitem__(self, k: int) -> tuple[int, str, str]: ...
    @overload
    def __getitem__(self, k: slice) -> list[tuple[int, str, str]]: ...
    def __getitem__(self, k: int | slice) -> tuple[int, str, str] | list[tuple[int, str, str]]:
        if isinstance(k, slice):
            return list(LaneFound(self._positions[k], self._codes[k]))
        return (int(self._positions[k]), *self._BY_CODE[int(self._codes[k])])


class Executor:
    """Runs the two passes somewhere, for one batch at a time in each of a few slots.

    The steps are split so a caller can overlap batches: :meth:`submit` starts pass 1 of a batch in
    a slot, :meth:`sizes` waits for its sizes, :meth:`submit_write` starts pass 2 into a host buffer,
    :meth:`wait` waits for that buffer. A slot's buffers are reused by the next batch in that slot.
    """

    SLOTS = 2

    def __init__(self) -> None:
        """No host buffers yet: they are allocated at first use and grow with the batches."""
        self._held: dict[str, npt.NDArray[Any]] = {}

    def _host(self, name: str, size: int, dtype: Any = np.uint8) -> npt.NDArray[Any]:
        """A host buffer of at least ``size`` items kept under ``name``; it grows by half when too small."""
        held = self._held.get(name)
        if held is None or len(held) < size or held.dtype != dtype:
            grown = int(len(held) * 1.5) if held is not None and held.dtype == dtype else 0
            held = self._held[name] = self._allocate_host(max(size, grown), dtype)
        return held

    def staging(self, size: int, slot: int = 0) -> npt.NDArray[np.uint8]:
        """A host buffer of at least ``size`` bytes for slot ``slot``'s values, reused between batches."""
        return self._host(f"staging.{slot}", size)

    def _allocate_host(self, size: int, dtype: Any = np.uint8) -> npt.NDArray[Any]:
        return np.empty(max(size, 1), dtype=dtype)

    def submit(self, li: LaneInput, n: int, slot: int) -> Any:
        """Start pass 1 of a packed batch in ``slot``; returns the handle the other steps take."""
        raise NotImplementedError

    def sizes(self, handle: Any) -> I64:
        """Wait for pass 1: each row's encoded size, or ``lane_rows.NOT_TAKEN`` / ``UPSTREAM_ERROR``."""
        raise NotImplementedError

    def submit_write(self, handle: Any, starts: I64, offsets: I64, out: npt.NDArray[np.uint8]) -> None:
        """Start pass 2: each taken row's datum at ``starts[r]`` (-1: skip) of ``out``.

        ``offsets`` are the output's row boundaries, ascending from 0 to its size (the rows the
        native core fills in included): an executor may write the output in pieces cut there.
        """
        raise NotImplementedError

    def wait(self, handle: Any) -> None:
        """Wait until pass 2 of ``handle`` has filled its host buffer."""
        raise NotImplementedError

    def encode(self, li: LaneInput, n: int) -> tuple[I64, I64, I64, Any]:
        """``(sizes, taken positions, taken rows' offsets, buffer)`` for one packed batch, taken rows only.

        The buffer may be the executor's own (reused by the next batch): callers copy out of it.
        """
        handle = self.submit(li, n, 0)
        sizes = self.sizes(handle)
        starts, taken, offsets = starts_of(sizes)
        total = int(offsets[-1])
        out = self._host("out", total)
        self.submit_write(handle, starts, offsets, out)
        self.wait(handle)
        return sizes, taken, offsets, out[:total]


@dataclass
class _CpuPass:
    """A batch between the passes on the CPU: its input, its values' copy and pass 1's per-row state."""

    li: LaneInput
    values: npt.NDArray[np.uint8]
    slots: I64
    content: tuple[Any, ...]
    sizes: I64


class CpuExecutor(Executor):
    """The lane compiled for the CPU: the same code as on the device, what the tests compare."""

    def __init__(self, tables: ContentTables, max_bytes: int, cache: Path | None = None) -> None:
        """Compile the lane with numba for this CPU (or load it from ``cache``)."""
        super().__init__()
        self.fns = compile_lane("cpu", cache)
        self.tables = tables
        self.max_bytes = max_bytes

    def submit(self, li: LaneInput, n: int, slot: int) -> _CpuPass:
        """Pass 1, run here and now, on a copy of the values.

        Pass 1 decodes strings in place, as it does in the device's copy: the host's values stay as
        they are for the native core.
        """
        t = self.tables
        width = max(t.nprops, 1)
        values = li.values.copy()
        slots = np.zeros((n, rows_mod.SLOT_COUNT), dtype=np.int64)
        cs, ce, cv = (np.zeros((n, width), dtype=np.int64) for _ in range(3))
        cd = np.zeros((n, width), dtype=np.float64)
        sizes = np.zeros(n, dtype=np.int64)
        rows = (li.partitions, li.offsets, li.timestamps)
        self.fns.measure(
            values,
            li.value_ends,
            *li.record_columns(),
            self.max_bytes,
            slots,
            *t.args(),
            cs,
            ce,
            cv,
            cd,
            *rows,
            sizes,
        )
        return _CpuPass(li, values, slots, (cs, ce, cv, cd), sizes)

    def sizes(self, handle: _CpuPass) -> I64:
        """Pass 1's sizes (already there)."""
        return handle.sizes

    def submit_write(self, handle: _CpuPass, starts: I64, offsets: I64, out: npt.NDArray[np.uint8]) -> None:
        """Pass 2, run here and now, in one piece."""
        li, t = handle.li, self.tables
        total = int(offsets[-1])
        target = out if total else np.zeros(1, dtype=np.uint8)
        rows = (li.partitions, li.offsets, li.timestamps)
        keys, _, _, headers, _ = li.record_columns()
        self.fns.write(
            handle.values, keys, headers, handle.slots, t.ptab, t.pnames, t.pends, t.nprops, *handle.content,
            *rows, starts, 0, total, target,
        )  # fmt: skip

    def wait(self, handle: _CpuPass) -> None:
        """Nothing to wait for."""


class LaneTransform:
    """A batch through the lane plus the native core for what the lane does not take."""

    def __init__(
        self,
        settings: Any,
        executor: Callable[[ContentTables, int, Path | None], Executor],
        clock: StageClock | None = None,
    ) -> None:
        """Check the layout and build the pass runner.

        ``settings`` is a ``TransformSettings``; ``executor`` builds the pass runner from the content
        tables, the size limit and the kernel cache.
        """
        from gpu_stage.runtime import usable_cores
        from gpu_stage.transform.native import NativeBackend

        self.clock = clock or StageClock()
        record = settings.record
        check_layout(record)
        # The rows the lane leaves (dead letters among them) are this process's CPU work: every core
        # it may use takes a share of a large batch's, unless the settings give it fewer.
        self.native = NativeBackend(settings, threads=getattr(settings, "native_threads", None) or usable_cores())
        tables = ContentTables.of(record.content_schema)
        self.executor = executor(tables, settings.max_record_bytes, settings.kernel_cache)
        self.taken_rows = 0
        self.rows = 0
        self.min_rows: int = getattr(settings, "device_min_rows", 0)
        """Batches below this many records go to the native core whole (``TransformSettings.device_min_rows``)."""
        from gpu_stage.transform.device.packed import PackedLane

        self.packed = PackedLane(self.native, self.executor, self.clock)

    def measure(self, batch: RawBatch) -> I64:
        """Pass 1 alone: each row's encoded size, or ``NOT_TAKEN`` (the native core's) or ``UPSTREAM_ERROR``."""
        if not len(batch):
            return np.zeros(0, dtype=np.int64)
        li = LaneInput.of(self.native._core, batch, self.executor.staging, int_columns(batch))
        return self.executor.sizes(self.executor.submit(li, len(batch), 0))

    def parse(self, batch: RawBatch) -> ParseResult:
        """Parse and encode one batch: byte-identical to the native core alone."""
        n = len(batch)
        if 0 < n < self.min_rows:  # below the device's fixed cost: the native core's alone
            self.rows += n
            with self.clock.stage("lane_small_native"):
                return self.native.parse(batch)
        return self.parse_on_device(batch)

    def parse_on_device(self, batch: RawBatch) -> ParseResult:
        """:meth:`parse` through the device passes whatever the batch's size."""
        n = len(batch)
        if n == 0:
            return ParseResult(EncodedRows(), [])
        with self.clock.stage("lane_pack"):
            columns = int_columns(batch)
            li = LaneInput.of(self.native._core, batch, self.executor.staging, columns)
        sizes, taken, offsets, buf = self.executor.encode(li, n)
        fast = EncodedRows(buf, offsets, taken, [])
        rest_positions = np.flatnonzero(sizes == rows_mod.NOT_TAKEN)
        with self.clock.stage("lane_rest_native"):
            rest = self.native.run(sub_batch(batch, rest_positions, columns))
        self.rows += n
        self.taken_rows += n - len(rest_positions)
        with self.clock.stage("lane_merge"):
            return combine(batch, fast, rest, rest_positions, LaneFound.of(sizes), self.native.settings.stage)


class CpuLaneBackend:
    """The device lane compiled for this CPU, as a backend: its host stages measured where no GPU is.

    Slower than the native core (numba on one core runs the per-row passes), so never a worker's
    choice; ``python -m bench.transform --backends lane-cpu`` reports its stage seconds
    (pack, the native core's share, merge), which are the GPU backend's host work.
    """

    name = "lane-cpu"

    def __init__(self, settings: Any) -> None:
        """``settings`` is a ``TransformSettings``; compiles the lane with numba (about a minute)."""
        self.lane = LaneTransform(settings, CpuExecutor)
        self.clock = self.lane.clock

    def parse(self, batch: RawBatch) -> ParseResult:
        """The lane's result: byte-identical to the native core's."""
        return self.lane.parse(batch)

    def input_buffer(self, size: int) -> npt.NDArray[np.uint8]:
        """A host buffer to pack a batch into; the lane reads it with no copy."""
        return self.lane.packed.input_buffer(size)

    def parse_stream(self, batches: Iterable[PackedBatch], overlap: bool = True) -> Iterator[ParseResult]:
        """Packed batches through the lane, two in flight (see :mod:`gpu_stage.transform.device.packed`)."""
        return self.lane.packed.stream(batches, overlap)

    def reset_counters(self) -> None:
        """Forget the stage times of the warm-up batch."""
        self.clock.reset()
