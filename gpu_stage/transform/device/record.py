r"""The device lane's record columns: ``request_id`` from the key, ``latency_ms`` and ``attributes`` from headers.

The keys and headers reach the device packed as :mod:`gpu_stage.transform.packed` packs them, so the host does
nothing per record for these columns. Per row, :func:`record_columns` checks the key, walks the
headers (a repeated header's last occurrence wins, semantics §2), reads the latency and checks the
attributes; the slots it fills say where each value lies, and pass 2 writes them from there
(``emit`` and ``put_attributes`` in :mod:`gpu_stage.transform.device.rows`).

Taken: a key that is UTF-8 (or none); whole header encodings; attributes that are absent, null or
not a JSON object at all (all three are null in semantics §2), or a flat object of distinct keys
without escapes whose values are strings. Anything else (a non-string value, a repeated key, a
``\\u`` escape, a cut header) returns False and the row goes to the native core, which decides.

Same source for CUDA and the CPU (see :mod:`gpu_stage.transform.device.scan`).
"""

# mypy: disable-error-code="no-untyped-def"
# ruff: noqa: SIM110
from __future__ import annotations

from typing import Any

import numpy as np

if "skip_ws" not in globals():  # a plain import; compile_lane runs the sources in order, jitted
    from gpu_stage.transform.device.scan import (
        COLON,
        LBRACE,
        QUOTE,
        is_utf8,
        key_index,
        next_member,
        open_object,
        scan_string,
        skip_ws,
    )


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)

# Slots of the record columns, after the body's (see :mod:`gpu_stage.transform.device.slots`).
KEY = 43  # a string slot triple in the keys: start (-1: no key), end, length
LATENCY = 46  # an int slot: NULL_INT for null
ATTRS = 47  # the attributes object's ``{`` in the headers (-1: null), then its end
ATTR_COUNT = 49
RECORD_END = 50
NULL_INT = -9223372036854775807 - 1
# More entries than this go to the native core (the repeated-key check is quadratic).
MAX_ATTRIBUTES = 64
# The two header names the transform reads, packed for ``key_index``.
HEADER_NAMES = np.frombuffer(b"latency.msattributes", dtype=np.uint8).copy()
HEADER_ENDS = np.array([10, 20], dtype=np.int64)
NULL_VALUE = 0xFFFFFFFF  # a value length of -1 as an unsigned 32-bit number


@jit
def le_u32(h, p):
    """The little-endian unsigned 32-bit number at ``h[p]``."""
    return int(h[p]) | (int(h[p + 1]) << 8) | (int(h[p + 2]) << 16) | (int(h[p + 3]) << 24)


@jit
def latency_value(h, s, e):
    """``latency.ms`` from ``h[s:e]`` (``s`` -1: none): 1 to 18 ASCII digits, else NULL_INT."""
    if s < 0 or e == s or e - s > 18:
        return NULL_INT
    value = 0
    for k in range(s, e):
        c = h[k]
        if c < 48 or c > 57:
            return NULL_INT
        value = value * 10 + (int(c) - 48)
    return value


@jit
def attribute_member(h, p, e):
    """The member whose key's quote is at ``p``: ``(key end, value quote, decoded value length, next, closed)``.

    A key with escapes, a value that is not a string, or a bad separator gives key end -1.
    ``next``/``closed`` are :func:`next_member`'s.
    """
    key_end, _ = scan_string(h, p, e, False)
    if key_end < 0:
        return -1, 0, 0, -1, 2
    q = skip_ws(h, key_end, e)
    if q >= e or h[q] != COLON:
        return -1, 0, 0, -1, 2
    q = skip_ws(h, q + 1, e)
    if q >= e or h[q] != QUOTE:
        return -1, 0, 0, -1, 2
    value_end, decoded = scan_string(h, q, e, True)
    if value_end < 0:
        return -1, 0, 0, -1, 2
    after, closed = next_member(h, value_end, e)
    return key_end, q, decoded, after, closed


@jit
def same_bytes(h, a, a_end, b, b_end):
    """Whether ``h[a:a_end]`` and ``h[b:b_end]`` are equal."""
    if a_end - a != b_end - b:
        return False
    for k in range(a_end - a):
        if h[a + k] != h[b + k]:
            return False
    return True


@jit
def repeated_key(h, s, e, count, p, key_end):
    """Whether the key ``h[p:key_end]`` is one of the first ``count`` keys of the object at ``s``."""
    q, _ = open_object(h, s, e)
    for _ in range(count):
        q_end, _, _, after, _ = attribute_member(h, q, e)
        if same_bytes(h, q, q_end, p, key_end):
            return True
        q = after
    return False


@jit
def attribute_count(h, s, e):
    """Entries of the flat string object whose ``{`` is at ``s`` and which ends ``h[:e]``; -1 when not taken."""
    p, closed = open_object(h, s, e)
    count = 0
    while closed == 0:
        if count == MAX_ATTRIBUTES:
            return -1
        key_end, _, _, after, closed = attribute_member(h, p, e)
        # A repeated key keeps its first position but its last value: not for the lane.
        if key_end < 0 or repeated_key(h, s, e, count, p, key_end):
            return -1
        count += 1
        p = after
    if p < 0 or skip_ws(h, p, e) != e:
        return -1
    return count


@jit
def header_values(hb, s, e):
    """The last ``latency.ms`` and ``attributes`` values of the headers ``hb[s:e]``: ``(ls, le, as, ae, ok)``.

    A start of -1 is an absent or null value; ``ok`` is False for a cut encoding.
    """
    lat_s, lat_e, att_s, att_e = -1, -1, -1, -1
    p = s
    while p < e:
        if e - p < 4:
            return -1, -1, -1, -1, False
        name_len = le_u32(hb, p)
        p += 4
        if name_len > e - p - 4:
            return -1, -1, -1, -1, False
        name = p
        p += name_len
        value_len = le_u32(hb, p)
        p += 4
        vs, ve = -1, -1
        if value_len != NULL_VALUE:
            if value_len >= 0x80000000 or value_len > e - p:
                return -1, -1, -1, -1, False
            vs, ve = p, p + value_len
            p = ve
        which = key_index(hb, name, name + name_len, HEADER_NAMES, HEADER_ENDS, 2)
        if which == 0:
            lat_s, lat_e = vs, ve
        elif which == 1:
            att_s, att_e = vs, ve
    return lat_s, lat_e, att_s, att_e, True


@jit
def record_columns(kb, kends, knull, hb, hends, slots, r):
    """Row ``r``'s key, latency and attributes into its slots; False when the lane does not take them."""
    slots[r, KEY] = -1
    if knull[r] == 0:
        s = kends[r - 1] if r > 0 else 0
        e = kends[r]
        if not is_utf8(kb, s, e):
            return False
        slots[r, KEY] = s
        slots[r, KEY + 1] = e
        slots[r, KEY + 2] = e - s
    s = hends[r - 1] if r > 0 else 0
    lat_s, lat_e, att_s, att_e, ok = header_values(hb, s, hends[r])
    if not ok:
        return False
    slots[r, LATENCY] = latency_value(hb, lat_s, lat_e)
    slots[r, ATTRS] = -1
    if att_s >= 0:
        q = skip_ws(hb, att_s, att_e)
        if q < att_e and hb[q] == LBRACE:
            count = attribute_count(hb, q, att_e)
            if count < 0:
                return False
            slots[r, ATTRS] = q
            slots[r, ATTRS + 1] = att_e
            slots[r, ATTR_COUNT] = count
    return True
