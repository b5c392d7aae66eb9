"""The content JSON Schema as arrays the device lane reads, and the record layout it writes.

The schema is data (:class:`ContentTables`), not code, so one compiled kernel serves every schema.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.device import slots as layout
from gpu_stage.transform.device.columns import I64
from llmpipe.errors import ConfigError
from llmpipe.record import TypedRecord

log = logging.getLogger(__name__)
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


@dataclass(frozen=True)
class ContentTables:
    """The content JSON Schema as the arrays the lane reads (see ``P_*`` in :mod:`gpu_stage.transform.device.slots`)."""

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
        ptab = np.zeros((max(len(names), 1), layout.PTAB_COLS), dtype=np.int64)
        pmin = np.zeros(max(len(names), 1), dtype=np.float64)
        pmax = np.zeros(max(len(names), 1), dtype=np.float64)
        enum_values: list[bytes] = []
        for j, name in enumerate(names):
            enum_values += _property_row(props[name], ptab[j], pmin, pmax, j, len(enum_values))
        ptab[:, layout.P_REQUIRED] = -1
        required = 0
        for rank, name in enumerate(schema.get("required") or []):
            if name not in props:  # always missing: the native core writes that error
                required = -1
                break
            j = names.index(name)
            required |= 1 << j
            if ptab[j, layout.P_REQUIRED] < 0:
                ptab[j, layout.P_REQUIRED] = rank
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
    r = layout
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
        return layout.F_SLOW
    if isinstance(value, float) and math.isfinite(value):
        bounds[j] = value
        return 0
    return layout.F_SLOW


def check_layout(record: TypedRecord) -> None:
    """Refuse a record schema whose layout differs from what the lane writes (a ConfigError)."""
    names = tuple(f["name"] for f in record.avro["fields"])
    content = next(f for f in record.avro["fields"] if f["name"] == "content")["type"][1]
    content_names = [f["name"] for f in content["fields"]]
    if names != FIELDS or content_names != list(record.content_schema.get("properties") or {}):
        msg = "the device lane does not write this record layout: " + json.dumps(names)
        raise ConfigError(msg)
