"""The device lane's Avro writer: a row's datum from its slots, or only its size.

:func:`emit` serves both passes: with ``write`` false it only counts bytes (pass 1's size), with
``write`` true it writes them at the row's offset (pass 2), so the size and the bytes cannot
disagree. Avro longs are zig-zag varints; strings are a length then UTF-8 bytes. The body's strings
are read from ``b``, the body as pass 1 decoded it (:func:`gpu_stage.transform.device.strings.mark_strings`):
each string slot's text lies there decoded.

Pass 2 may leave a row's long strings to a kernel of their own (:func:`put_dec_text`). With a
thread a row, each of a warp's 32 threads copies a string of its own a byte at a time, for as
long as the warp's longest, and each of its reads and writes is a transaction of its own; noted as
spans (where from, where to, how long), the strings are copied afterwards by
:func:`gpu_stage.transform.device.rows.copy_spans`, a warp a row, 32 bytes a step.

Same source for CUDA and the CPU (see :mod:`gpu_stage.transform.device.scan`).
"""

# mypy: disable-error-code="no-untyped-def"
# ruff: noqa: SIM109
from __future__ import annotations

import math
from typing import Any

if "skip_ws" not in globals():  # a plain import; compile_lane runs the sources in order, jitted
    from gpu_stage.transform.device.record import (
        ATTR_COUNT,
        ATTRS,
        KEY,
        LATENCY,
        NULL_INT,
        attribute_member,
    )
    from gpu_stage.transform.device.scan import (
        BSLASH,
        LANE_STEPS,
        escape_code,
        literal,
        open_object,
        put_code,
        scan_number,
        scan_string,
        skip_ws,
    )
    from gpu_stage.transform.device.slots import (
        CACHED,
        COMPLETION,
        CONTENT,
        CONTENT_STATE,
        CREATED,
        E_ADDITIONAL,
        E_INVALID_JSON,
        E_NOT_OBJECT,
        ERROR_AT,
        ERROR_CODE,
        ERROR_END,
        ERROR_TEXT_ENDS,
        ERROR_TEXTS,
        FINGERPRINT,
        FINISH,
        ID,
        INDEX,
        MODEL,
        NUM_CHOICES,
        OBJECT,
        P_ARRAY,
        P_KIND,
        PROMPT,
        REASONING,
        SPAN_FIRST,
        SPAN_MIN,
        STOP,
        TIER,
        TOOL_ARGS,
        TOOL_NAME,
        TOOL_VALID,
        TOTAL,
    )
    from gpu_stage.transform.device.warp import (
        decode_steps,
        warp_copy_bytes,
    )


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)

@jit
def put_byte(out, q, value, write):
    """One byte at ``q`` (only counted in the size pass)."""
    if write:
        out[q] = value
    return q + 1


@jit
def put_long(out, q, value, write):
    """Avro long: zig-zag, then base-128 varint (the right shift is made logical by the mask)."""
    zz = (value << 1) ^ (value >> 63)
    while zz < 0 or zz > 127:
        q = put_byte(out, q, (zz & 0x7F) | 0x80, write)
        zz = (zz >> 7) & 0x01FFFFFFFFFFFFFF
    return put_byte(out, q, zz, write)


@jit
def put_opt_long(out, q, value, write):
    """A ``["null", "long"]`` union from an int slot."""
    if value == NULL_INT:
        return put_byte(out, q, 0, write)
    return put_long(out, put_byte(out, q, 2, write), value, write)


@jit
def put_text(src, s, length, escaped, out, q, write):
    """Avro string from ``src[s:]``: ``length`` decoded bytes, escapes decoded when ``escaped``."""
    q = put_long(out, q, length, write)
    if not write:
        return q + length
    return put_string_bytes(src, s, length, escaped, out, q)


@jit
def put_string_bytes(src, s, length, escaped, out, q):
    """A string's ``length`` decoded bytes from ``src[s:]`` at ``out[q:]`` (no length before); the new ``q``."""
    if escaped:
        return put_decoded(src, s, length, out, q)
    if LANE_STEPS:
        warp_copy_bytes(src, s, out, q, length)
        return q + length
    for k in range(length):
        out[q + k] = src[s + k]
    return q + length


@jit
def put_dec_text(dec, s, length, escaped, out, q, write, spans, r):
    """:func:`put_text` for a string of ``dec``; a long one's bytes are left to a span where ``spans`` has room.

    A span is three columns of row ``r`` of ``spans`` from :data:`SPAN_FIRST` on: where the text
    starts in ``dec``, where its bytes go in ``out``, and its length (``~length`` when escaped);
    column 0 counts the row's spans. ``spans`` one column wide takes none, and neither does the
    size pass nor a warp a row (which copies 32 bytes a step itself).
    """
    if write and not LANE_STEPS and length >= SPAN_MIN:
        k = spans[r, 0]
        at = SPAN_FIRST + 3 * k
        if at + 3 <= spans.shape[1]:
            q = put_long(out, q, length, write)
            spans[r, at] = s
            spans[r, at + 1] = q
            spans[r, at + 2] = ~length if escaped else length
            spans[r, 0] = k + 1
            return q + length
    return put_text(dec, s, length, escaped, out, q, write)


@jit
def copy_row_spans(dec, spans, r, out):
    """The bytes of the spans pass 2 left for row ``r`` (:func:`put_dec_text`), each at its place in ``out``."""
    for k in range(spans[r, 0]):
        at = SPAN_FIRST + 3 * k
        length = spans[r, at + 2]
        escaped = length < 0
        put_string_bytes(dec, spans[r, at], ~length if escaped else length, escaped, out, spans[r, at + 1])


@jit
def put_decoded(src, s, length, out, q):
    """The ``length`` bytes that the JSON string body at ``src[s:]`` decodes to, at ``out[q:]``; the new ``q``."""
    if LANE_STEPS:
        return decode_steps(src, s, length, out, q)
    k = s
    end = q + length
    while q < end:
        c = src[k]
        if c == BSLASH:
            k, code = escape_code(src, k, k + 12)
            q = put_code(out, q, code)
        else:
            out[q] = c
            k += 1
            q += 1
    return q


@jit
def put_opt_text(src, slots, r, slot, out, q, write):
    """A ``["null", "string"]`` union from a string slot of ``src`` whose text has no escapes (the key)."""
    s = slots[r, slot]
    if s < 0:
        return put_byte(out, q, 0, write)
    return put_text(src, s, slots[r, slot + 2], False, out, put_byte(out, q, 2, write), write)


@jit
def put_opt_string(dec, slots, r, slot, out, q, write, spans):
    """A ``["null", "string"]`` union from a string slot of the body: its text as pass 1 decoded it into ``dec``."""
    s = slots[r, slot]
    if s < 0:
        return put_byte(out, q, 0, write)
    return put_dec_text(dec, s, slots[r, slot + 2], False, out, put_byte(out, q, 2, write), write, spans, r)


@jit
def put_attributes(hb, slots, r, out, q, write):
    """``attributes``: a ``["null", map]`` union from the flat object pass 1 checked in the headers."""
    s = slots[r, ATTRS]
    if s < 0:
        return put_byte(out, q, 0, write)
    q = put_byte(out, q, 2, write)
    count = slots[r, ATTR_COUNT]
    if count > 0:
        e = slots[r, ATTRS + 1]
        q = put_long(out, q, count, write)
        p, _ = open_object(hb, s, e)
        for _ in range(count):
            key_end, value, length, after, _ = attribute_member(hb, p, e)
            q = put_text(hb, p + 1, key_end - p - 2, False, out, q, write)  # keys have no escapes
            q = put_text(hb, value + 1, length, True, out, put_byte(out, q, 2, write), write)
            p = after
    return put_byte(out, q, 0, write)


@jit
def put_content_scalar(sc, p, e, kind, out, q, write):
    """An array item of a valid content property, scanned again from the decoded text; ``(q, end)``."""
    if kind == 0:
        end, length = scan_string(sc, p, e, True)
        return put_text(sc, p + 1, length, True, out, q, write), end
    if kind == 3:
        end, value = literal(sc, p, e)
        return put_byte(out, q, value, write), end
    end, num, ivalue, dvalue = scan_number(sc, p, e)
    if kind == 2:
        return put_long(out, q, ivalue, write), end
    if num == 1:
        dvalue = float(ivalue)
    return put_double(out, q, dvalue, write), end


@jit
def double_bits(x):
    """IEEE-754 bits of a zero or normal double, by exact power-of-two scaling (no bit casts needed).

    The sign of zero is read through ``atan2`` (``atan2(-0.0, -1) = -pi``); the lane's doubles are
    never subnormal.
    """
    if x == 0.0:
        return NULL_INT if math.atan2(x, -1.0) < 0 else 0
    negative = x < 0
    m = -x if negative else x
    e = 0
    while m >= 4294967296.0:
        m *= 2.3283064365386963e-10
        e += 32
    while m >= 2.0:
        m *= 0.5
        e += 1
    while m < 2.3283064365386963e-10:
        m *= 4294967296.0
        e -= 32
    while m < 1.0:
        m *= 2.0
        e -= 1
    bits = ((e + 1023) << 52) | int((m - 1.0) * 4503599627370496.0)
    return bits | NULL_INT if negative else bits


@jit
def put_double(out, q, value, write):
    """Avro double: the 8 little-endian bytes of the IEEE-754 value."""
    if write:
        bits = double_bits(value)
        for k in range(8):
            out[q + k] = (bits >> (8 * k)) & 0xFF
    return q + 8


@jit
def put_content(sc, ptab, nprops, r, cs, ce, cv, cd, out, q, write, spans):
    """The ``content`` record of a valid row: every property as a ``["null", T]`` union, schema order."""
    q = put_byte(out, q, 2, write)
    for j in range(nprops):
        s = cs[r, j]
        if s < 0:
            q = put_byte(out, q, 0, write)
            continue
        q = put_byte(out, q, 2, write)
        kind = ptab[j, P_KIND]
        if ptab[j, P_ARRAY]:
            count = cv[r, j]
            if count > 0:
                q = put_long(out, q, count, write)
                p = skip_ws(sc, s + 1, ce[r, j])
                for _ in range(count):
                    q = put_byte(out, q, 2, write)
                    q, p = put_content_scalar(sc, p, ce[r, j], kind, out, q, write)
                    p = skip_ws(sc, p, ce[r, j])
                    p = skip_ws(sc, p + 1, ce[r, j])
            q = put_byte(out, q, 0, write)
        elif kind == 0:
            q = put_dec_text(sc, s, cv[r, j], True, out, q, write, spans, r)  # cv: its decoded length
        elif kind == 1:
            q = put_double(out, q, cd[r, j], write)
        elif kind == 2:
            q = put_long(out, q, cv[r, j], write)
        else:
            q = put_byte(out, q, cv[r, j], write)
    return q


@jit
def put_content_error(b, pnames, pends, slots, r, out, q, write):
    """``content_error``: null, or an invalid content's error text (its code, then a property's or key's name)."""
    if slots[r, CONTENT_STATE] != 2:
        return put_byte(out, q, 0, write)
    code = slots[r, ERROR_CODE]
    first = ERROR_TEXT_ENDS[code - 1] if code > 0 else 0
    length = ERROR_TEXT_ENDS[code] - first
    at = slots[r, ERROR_AT]
    if code == E_ADDITIONAL:
        _, name = scan_string(b, at - 1, slots[r, ERROR_END] + 1, True)  # the key, decoded
    elif code == E_NOT_OBJECT or code == E_INVALID_JSON:
        name = 0
    else:
        at = pends[at - 1] if at > 0 else 0
        name = pends[slots[r, ERROR_AT]] - at
    q = put_long(out, put_byte(out, q, 2, write), length + name, write)
    if not write:
        return q + length + name
    for k in range(length):
        out[q + k] = ERROR_TEXTS[first + k]
    q += length
    if code == E_ADDITIONAL:
        return put_decoded(b, at, name, out, q)
    for k in range(name):
        out[q + k] = pnames[at + k]
    return q + name


@jit
def emit(b, kb, hb, slots, r, ptab, pnames, pends, nprops, cs, ce, cv, cd, part, off, ts, out, q, write, spans):
    """The row's Avro datum, field by field in ``TypedRecord.avro`` order; the end position.

    Its long strings' bytes go to spans where ``spans`` has columns for them (:func:`put_dec_text`).
    """
    q = put_opt_text(kb, slots, r, KEY, out, q, write)  # the key, checked UTF-8 in pass 1
    q = put_opt_string(b, slots, r, ID, out, q, write, spans)
    q = put_opt_string(b, slots, r, OBJECT, out, q, write, spans)
    q = put_opt_long(out, q, slots[r, CREATED], write)
    for slot in (MODEL, FINISH, STOP):
        q = put_opt_string(b, slots, r, slot, out, q, write, spans)
    q = put_opt_string(b, slots, r, CONTENT, out, q, write, spans)
    for slot in (REASONING, TOOL_NAME):
        q = put_opt_string(b, slots, r, slot, out, q, write, spans)
    q = put_opt_string(b, slots, r, TOOL_ARGS, out, q, write, spans)
    valid = slots[r, TOOL_VALID]
    q = put_byte(out, q, 0, write) if valid < 0 else put_byte(out, put_byte(out, q, 2, write), valid, write)
    n = slots[r, NUM_CHOICES]
    q = put_opt_long(out, q, n, write)
    q = put_byte(out, q, 2, write)
    if n > 0:
        q = put_long(out, q, 1, write)
        q = put_byte(out, q, 2, write)
        q = put_opt_long(out, q, slots[r, INDEX], write)
        q = put_opt_string(b, slots, r, FINISH, out, q, write, spans)
        q = put_opt_string(b, slots, r, CONTENT, out, q, write, spans)
    q = put_byte(out, q, 0, write)
    for slot in (PROMPT, COMPLETION, TOTAL, CACHED):
        q = put_opt_long(out, q, slots[r, slot], write)
    q = put_opt_long(out, q, slots[r, LATENCY], write)
    q = put_attributes(hb, slots, r, out, q, write)
    q = put_opt_string(b, slots, r, FINGERPRINT, out, q, write, spans)
    q = put_opt_string(b, slots, r, TIER, out, q, write, spans)
    q = put_byte(out, q, 0, write)  # metadata: null (an object is left to the native core)
    q = put_byte(out, put_byte(out, q, 2, write), 0, write)  # extra: an empty map
    state = slots[r, CONTENT_STATE]
    if state == 1:
        q = put_content(b, ptab, nprops, r, cs, ce, cv, cd, out, q, write, spans)
        q = put_byte(out, put_byte(out, q, 2, write), 1, write)
    elif state == 2:  # content null, content_valid false
        q = put_byte(out, put_byte(out, put_byte(out, q, 0, write), 2, write), 0, write)
    else:
        q = put_byte(out, put_byte(out, q, 0, write), 0, write)
    q = put_content_error(b, pnames, pends, slots, r, out, q, write)
    q = put_long(out, put_byte(out, q, 2, write), part, write)
    q = put_long(out, put_byte(out, q, 2, write), off, write)
    if ts < 0:
        return put_byte(out, q, 0, write)
    return put_long(out, put_byte(out, q, 2, write), ts, write)
