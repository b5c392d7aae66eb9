"""``created`` to epoch milliseconds: the one conversion both backends must agree on to the bit.

vLLM sends integer Unix seconds; other servers and proxies send float seconds or ISO-8601 text. Each
accepted form has one exact rule (see ``gpu_stage/transform/contract/semantics.md``), using only integer arithmetic and
one IEEE-754 multiply, so a GPU implementation can reproduce it.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

INT64_MAX = 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:(Z)|([+-])(\d{2}):(\d{2}))", re.ASCII
)


class CreatedError(ValueError):
    """``created`` has a type or value that is not a point in time after the epoch."""


def created_ms(value: Any) -> int:
    """Epoch milliseconds for a ``created`` value; raises :class:`CreatedError` otherwise."""
    if isinstance(value, bool):
        msg = "created: boolean is not a timestamp"
        raise CreatedError(msg)
    if isinstance(value, int):
        ms = value * 1000
    elif isinstance(value, float):
        scaled = value * 1000.0
        if not math.isfinite(scaled):
            msg = "created: not finite"
            raise CreatedError(msg)
        ms = round(scaled)
    elif isinstance(value, str):
        ms = _iso_ms(value)
    else:
        msg = f"created: {type(value).__name__} is not a timestamp"
        raise CreatedError(msg)
    if ms < 0 or ms > INT64_MAX:
        msg = "created: outside 1970-01-01 .. int64 milliseconds"
        raise CreatedError(msg)
    return ms


def _iso_ms(text: str) -> int:
    """ISO-8601 with a ``Z`` or ``±HH:MM`` offset; fractions beyond milliseconds are truncated."""
    m = _ISO.fullmatch(text)
    if m is None:
        msg = "created: string is not ISO-8601 with an offset"
        raise CreatedError(msg)
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac, zulu, sign, off_h, off_m = m.groups()[6:]
    offset = timedelta(0)
    if zulu is None:
        offset = timedelta(hours=int(off_h), minutes=int(off_m))
        if sign == "-":
            offset = -offset
    try:
        when = datetime(year, month, day, hour, minute, second, tzinfo=timezone(offset))
    except ValueError as exc:
        msg = f"created: {exc}"
        raise CreatedError(msg) from exc
    millis = int((frac or "0")[:3].ljust(3, "0"))
    return (when - _EPOCH) // timedelta(milliseconds=1) + millis
