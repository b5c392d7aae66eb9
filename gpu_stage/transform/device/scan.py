r"""JSON scanning for the device lane: one thread walks one body, byte by byte, with no allocation.

Every function here is plain Python over ``uint8`` arrays and integer positions, so the same source
compiles for CUDA (``numba.cuda.jit(device=True)``) and for the CPU (``numba.njit``, what the tests
run); :func:`gpu_stage.transform.device.lane.compile_lane` executes this file once per target with ``jit``
bound to that target's decorator. A function returns ``-1`` (or a tuple starting with ``-1``) when the
lane does not take the input: invalid JSON and valid JSON outside the lane's subset (long numbers,
deep nesting) alike. Strings are JSON's whole: every escape, ``\\u`` escapes with
surrogate pairs decoded to UTF-8 (a lone surrogate is invalid, as in the contract). For what the
lane does not take, :func:`json_verdict` and :func:`body_verdict` check the text strictly, as the
native core's reader does (every escape, any number), and say when it is certainly not JSON, not
UTF-8 or not an object: those verdicts are the lane's to write. Anything else
goes to the native core, which decides what it is.
"""

# mypy: disable-error-code="no-untyped-def"
# ruff: noqa: C901, PLR0915, SIM109
from __future__ import annotations

from typing import Any

import numpy as np


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)
LANE_STEPS: bool = globals().get("LANE_STEPS", False)
"""True in the lane's ``warp`` build: a warp walks each body, and strings are read a step of 32 bytes
at a time (:mod:`gpu_stage.transform.device.warp`, whose functions these two names are then)."""
scan_string_steps: Any = globals().get("scan_string_steps")
copy_string_steps: Any = globals().get("copy_string_steps")
skip_ws_steps: Any = globals().get("skip_ws_steps")

QUOTE = 34
BSLASH = 92
LBRACE = 123
RBRACE = 125
LBRACK = 91
RBRACK = 93
COLON = 58
COMMA = 44
MAX_DEPTH = 62
REFUSED = 1
"""In a string's marks (:mod:`gpu_stage.transform.device.strings`), ``t[open + 1]`` of a string whose
``t[open]`` is 0: the string is refused (bad, or never closed). 0 there: it is only too long for a mark."""
# Exact powers of ten: mantissa * 10**k with both exact is one correctly rounded IEEE operation.
POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)
# 5**k below 2**61 (k <= 26): m / 10**k = (m / 5**k) * 2**-k, and the division is exact integer work.
POW5 = np.array([5**k for k in range(27)], dtype=np.int64)
MAX_POW5 = 26
MAX_EXACT = 9007199254740992  # 2**53


@jit
def is_ws(c):
    """Whether byte ``c`` is JSON whitespace."""
    return c == 32 or c == 9 or c == 10 or c == 13


@jit
def skip_ws(b, p, e):
    """First position at or after ``p`` that is not JSON whitespace.

    The ``warp`` build reads a run of whitespace 32 bytes a step (indented JSON has long ones).
    """
    if LANE_STEPS:
        return skip_ws_steps(b, p + 1, e) if p < e and is_ws(b[p]) else p
    while p < e:
        c = b[p]
        if c == 32 or c == 9 or c == 10 or c == 13:
            p += 1
        else:
            break
    return p


@jit
def trim_end(b, s, e):
    """End of ``b[s:e]`` without trailing JSON whitespace."""
    while e > s:
        c = b[e - 1]
        if c == 32 or c == 9 or c == 10 or c == 13:
            e -= 1
        else:
            break
    return e


@jit
def utf8_len(b, p, e):
    """Length of the well-formed UTF-8 sequence whose lead byte (>= 0x80) is at ``p``; 0 when ill-formed."""
    c = b[p]
    if c < 0xC2 or c > 0xF4:
        return 0
    n = 2 if c < 0xE0 else (3 if c < 0xF0 else 4)
    if p + n > e:
        return 0
    c1 = b[p + 1]
    if (c1 & 0xC0) != 0x80:
        return 0
    if c == 0xE0 and c1 < 0xA0:
        return 0
    if c == 0xED and c1 >= 0xA0:
        return 0
    if c == 0xF0 and c1 < 0x90:
        return 0
    if c == 0xF4 and c1 >= 0x90:
        return 0
    for k in range(2, n):
        if (b[p + k] & 0xC0) != 0x80:
            return 0
    return n


@jit
def is_utf8(b, s, e):
    """Whether ``b[s:e]`` is well-formed UTF-8."""
    p = s
    while p < e:
        if b[p] < 0x80:
            p += 1
        else:
            k = utf8_len(b, p, e)
            if k == 0:
                return False
            p += k
    return True


@jit
def simple_escape(d):
    r"""Whether ``\\`` followed by byte ``d`` is a one-byte escape (everything but ``\\u``)."""
    return d == QUOTE or d == BSLASH or d == 47 or d == 98 or d == 102 or d == 110 or d == 114 or d == 116


@jit
def unescape(d):
    r"""The byte a one-byte escape ``\\d`` stands for."""
    if d == 98:
        return 8
    if d == 102:
        return 12
    if d == 110:
        return 10
    if d == 114:
        return 13
    if d == 116:
        return 9
    return d


@jit
def hex4(b, p, e):
    """The value of the four hex digits at ``p``, or -1."""
    if p + 4 > e:
        return -1
    code = 0
    for k in range(p, p + 4):
        c = int(b[k])
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            return -1
        code = code * 16 + d
    return code


@jit
def escape_code(b, p, e):
    r"""The escape whose backslash is at ``p``: ``(its end, the code point it stands for)``.

    ``\\uD8xx\\uDCxx`` pairs give one code point above U+FFFF; ``(-1, 0)`` for an invalid escape and a
    lone surrogate (semantics §1: invalid JSON).
    """
    if p + 1 >= e:
        return -1, 0
    d = b[p + 1]
    if simple_escape(d):
        return p + 2, unescape(d)
    if d != 117:
        return -1, 0
    high = hex4(b, p + 2, e)
    if high < 0 or 0xDC00 <= high < 0xE000:
        return -1, 0
    if not 0xD800 <= high < 0xDC00:
        return p + 6, high
    if p + 8 > e or b[p + 6] != BSLASH or b[p + 7] != 117:
        return -1, 0
    low = hex4(b, p + 8, e)
    if not 0xDC00 <= low < 0xE000:
        return -1, 0
    return p + 12, 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)


@jit
def utf8_width(code):
    """Bytes of UTF-8 that code point ``code`` takes."""
    if code < 0x80:
        return 1
    if code < 0x800:
        return 2
    return 3 if code < 0x10000 else 4


@jit
def utf8_byte(code, width, k):
    """Byte ``k`` of the ``width``-byte UTF-8 spelling of ``code``."""
    if width == 1:
        return code
    if k == 0:
        lead = 0xC0 if width == 2 else (0xE0 if width == 3 else 0xF0)
        return lead | (code >> (6 * (width - 1)))
    return 0x80 | ((code >> (6 * (width - 1 - k))) & 0x3F)


@jit
def put_code(out, q, code):
    """Write code point ``code`` as UTF-8 at ``out[q:]``; the new ``q``."""
    width = utf8_width(code)
    for k in range(width):
        out[q + k] = utf8_byte(code, width, k)
    return q + width


@jit
def scan_string(b, p, e, allow_escapes):
    r"""The string whose opening quote is at ``p``: ``(end after the closing quote, decoded length)``.

    The decoded length is in UTF-8 bytes, every escape decoded. ``(-1, 0)`` for an invalid string
    (a lone surrogate included) and, when ``allow_escapes`` is false, for any escape.
    """
    if LANE_STEPS:
        return scan_string_steps(b, p, e, allow_escapes)
    p += 1
    n = 0
    while p < e:
        c = b[p]
        if c == QUOTE:
            return p + 1, n
        if c == BSLASH:
            if not allow_escapes:
                return -1, 0
            p, code = escape_code(b, p, e)
            if p < 0:
                return -1, 0
            n += utf8_width(code)
        elif c < 0x20:
            return -1, 0
        elif c < 0x80:
            p += 1
            n += 1
        else:
            k = utf8_len(b, p, e)
            if k == 0:
                return -1, 0
            p += k
            n += k
    return -1, 0


@jit
def refused(t, p, e):
    """Whether the marks ``t`` (empty: none) say the string opened at ``p`` (``e``: the body's end) is invalid.

    A reader then stops there without reading the string: a truncated body's last string is often
    most of it, and a byte that is not UTF-8 may sit at the end of a long one.
    """
    return t.shape[0] > 0 and p + 1 < e and t[p] == 0 and t[p + 1] == REFUSED


@jit
def string_at(b, t, p, e, allow_escapes):
    """:func:`scan_string`'s answer for the body's string at ``p``, read from ``t`` when it holds the body's marks.

    ``t`` is :func:`gpu_stage.transform.device.strings.mark_strings`'s array (a string in two
    entries, no byte of it read here), or empty for text it does not mark. Where it holds no span
    (a string it refuses or a very long one) the bytes are scanned.
    """
    span = int(t[p]) if t.shape[0] > 0 else 0
    if span == 0:
        return (-1, 0) if refused(t, p, e) else scan_string(b, p, e, allow_escapes)
    close = p + span
    length = int(t[close])
    if not allow_escapes and length < span - 1:
        return -1, 0
    return close + 1, length


@jit
def copy_string(b, s, e, out, q):
    """Decode the string body ``b[s:e]`` (between its quotes, escapes checked) into ``out[q:]``; new ``q``.

    In place (``out`` is ``b``, ``q <= s``) is safe: an escape is read whole before its code point is
    written, and no escape is shorter than the UTF-8 it stands for.
    """
    if LANE_STEPS:
        return copy_string_steps(b, s, e, out, q)
    while s < e:
        c = b[s]
        if c == BSLASH:
            s, code = escape_code(b, s, e)
            q = put_code(out, q, code)
        else:
            out[q] = c
            s += 1
            q += 1
    return q


@jit
def same_decoded(src, s, e, names, a, a_end):
    """Whether the string body ``src[s:e]`` (escapes checked) decodes to the bytes ``names[a:a_end]``."""
    while s < e:
        c = src[s]
        if c == BSLASH:
            s, code = escape_code(src, s, e)
            width = utf8_width(code)
            if a + width > a_end:
                return False
            for k in range(width):
                if names[a + k] != utf8_byte(code, width, k):
                    return False
            a += width
        else:
            if a >= a_end or names[a] != c:
                return False
            a += 1
            s += 1
    return a == a_end


@jit
def digits(b, p, e):
    """End of the run of ASCII digits at ``p``."""
    while p < e and 48 <= b[p] <= 57:
        p += 1
    return p


@jit
def scan_number(b, p, e):
    """The JSON number at ``p``: ``(end, kind, integer value, double value)``.

    kind 1: an integer of at most 18 digits (exact); 2: a float, correctly rounded: a decimal
    mantissa of at most 15 significant digits with a power of ten within 10**±22 (one IEEE multiply
    or divide of two exact doubles), or of 16 to 18 digits over at most 10**26
    (:func:`ratio_to_double`); 0: valid and finite but outside that subset;
    -1: invalid, or large enough that it might overflow to infinity (not taken).
    """
    start = p
    neg = p < e and b[p] == 45
    if neg:
        p += 1
    if p >= e or not (48 <= b[p] <= 57):
        return -1, -1, 0, 0.0
    int_end = p + 1 if b[p] == 48 else digits(b, p, e)
    mant = 0
    sig = 0
    for k in range(p, int_end):
        d = int(b[k]) - 48
        if sig > 0 or d != 0:
            sig += 1
            if sig <= 18:
                mant = mant * 10 + d
    p = int_end
    frac = 0
    is_float = False
    if p < e and b[p] == 46:
        is_float = True
        frac_end = digits(b, p + 1, e)
        if frac_end == p + 1:
            return -1, -1, 0, 0.0
        for k in range(p + 1, frac_end):
            d = int(b[k]) - 48
            frac += 1
            if sig > 0 or d != 0:
                sig += 1
                if sig <= 18:
                    mant = mant * 10 + d
        p = frac_end
    exp10 = 0
    if p < e and (b[p] == 101 or b[p] == 69):
        is_float = True
        p += 1
        exp_neg = p < e and b[p] == 45
        if p < e and (b[p] == 45 or b[p] == 43):
            p += 1
        exp_end = digits(b, p, e)
        if exp_end == p:
            return -1, -1, 0, 0.0
        if exp_end - p > 4:
            # Tiny magnitudes round to zero; huge ones overflow, which the reference rejects.
            return exp_end, 0 if (exp_neg or mant == 0) else -1, 0, 0.0
        for k in range(p, exp_end):
            exp10 = exp10 * 10 + (int(b[k]) - 48)
        if exp_neg:
            exp10 = -exp10
        p = exp_end
    if not is_float:
        int_digits = int_end - start - (1 if neg else 0)
        if int_digits > 308:
            return p, -1, 0, 0.0  # above 10**308 a double may be infinite, which the reference rejects
        if int_digits > 18:
            return p, 0, 0, 0.0
        return p, 1, -mant if neg else mant, 0.0
    scale = exp10 - frac
    if mant != 0 and sig + scale > 308:
        return p, -1, 0, 0.0  # may overflow to infinity, which the reference rejects
    if sig > 15:
        if sig > 18 or not -MAX_POW5 <= scale < 0:
            return p, 0, 0, 0.0
        value = ratio_to_double(mant, -scale)
        return p, 2, 0, -value if neg else value
    value = float(mant)
    if mant == 0:
        value = 0.0
    elif 0 <= scale <= 22:
        value = value * POW10[scale]
    elif -22 <= scale < 0:
        value = value / POW10[-scale]
    else:
        return p, 0, 0, 0.0
    return p, 2, 0, -value if neg else value


@jit
def ratio_to_double(m, k):
    """``m / 10**k`` correctly rounded to a double, ties to even, for ``0 < m < 2**60``, ``1 <= k <= 26``.

    Long division of ``m`` by ``5**k`` in integers until 54 bits (53 and a rounding bit) are known,
    the remainder saying whether anything lies below them; then ``2**-k`` scales exactly. This is
    the case one IEEE division cannot round correctly: mantissas of 16 to 18 digits, such as the
    17 that Python writes for ``0.1 + 0.2``.
    """
    d = POW5[k]
    q = m // d
    r = m - q * d
    e = -k
    while q < (1 << 53):
        r <<= 1
        q <<= 1
        if r >= d:
            q |= 1
            r -= d
        e -= 1
    below = r != 0
    while q >= (1 << 54):
        below = below or (q & 1) == 1
        q >>= 1
        e += 1
    mantissa = q >> 1
    if (q & 1) == 1 and (below or (mantissa & 1) == 1):
        mantissa += 1
    value = float(mantissa)
    e += 1
    while e < 0:
        value *= 0.5
        e += 1
    while e > 0:
        value *= 2.0
        e -= 1
    return value


@jit
def literal(b, p, e):
    """``true``/``false``/``null`` at ``p``: ``(end, value)`` with value 1, 0 or -1; ``(-1, 0)`` otherwise."""
    c = b[p]
    if c == 116 and p + 4 <= e and b[p + 1] == 114 and b[p + 2] == 117 and b[p + 3] == 101:
        return p + 4, 1
    if c == 102 and p + 5 <= e and b[p + 1] == 97 and b[p + 2] == 108 and b[p + 3] == 115 and b[p + 4] == 101:
        return p + 5, 0
    if c == 110 and p + 4 <= e and b[p + 1] == 117 and b[p + 2] == 108 and b[p + 3] == 108:
        return p + 4, -1
    return -1, 0


@jit
def is_null(b, p, e):
    """Whether the value at ``p`` is ``null``."""
    end, value = literal(b, p, e)
    return end > 0 and value == -1


@jit
def member_value(b, t, p, e, allow_escapes):
    """After an object's ``{`` or ``,`` (``p``): the position of the next member's value, or -1."""
    p = skip_ws(b, p, e)
    if p >= e or b[p] != QUOTE:
        return -1
    p, _ = string_at(b, t, p, e, allow_escapes)
    if p < 0:
        return -1
    p = skip_ws(b, p, e)
    if p >= e or b[p] != COLON:
        return -1
    return skip_ws(b, p + 1, e)


@jit
def scalar_end(b, t, p, e, allow_escapes):
    """End of the string, number or literal at ``p``; -1 when there is none the lane takes."""
    c = b[p]
    if c == QUOTE:
        end, _ = string_at(b, t, p, e, allow_escapes)
        return end
    if c == 45 or 48 <= c <= 57:
        end, kind, _, _ = scan_number(b, p, e)
        return end if kind >= 0 else -1
    end, _ = literal(b, p, e)
    return end


@jit
def skip_value(b, t, p, e, allow_escapes):
    """End of the JSON value at ``p`` (whitespace skipped), checked strictly; -1 when not taken.

    Iterative, with the open containers as a bit stack (1 object, 0 array), so nesting deeper than
    :data:`MAX_DEPTH` is left to the native core.
    """
    depth = 0
    stack = 0
    while True:
        p = skip_ws(b, p, e)
        if p >= e:
            return -1
        c = b[p]
        if c == LBRACE or c == LBRACK:
            if depth >= MAX_DEPTH:
                return -1
            depth += 1
            stack = (stack << 1) | (1 if c == LBRACE else 0)
            p = skip_ws(b, p + 1, e)
            if p >= e:
                return -1
            if b[p] != (RBRACE if c == LBRACE else RBRACK):
                if c == LBRACE:
                    p = member_value(b, t, p, e, allow_escapes)
                    if p < 0:
                        return -1
                continue
            depth -= 1
            stack >>= 1
        else:
            p = scalar_end(b, t, p, e, allow_escapes)
            if p < 0:
                return -1
            p -= 1
        # p is at the last byte of a complete value: close containers or move to the next member.
        p += 1
        while True:
            if depth == 0:
                return p
            p = skip_ws(b, p, e)
            if p >= e:
                return -1
            c = b[p]
            if c == COMMA:
                if stack & 1:
                    p = member_value(b, t, p + 1, e, allow_escapes)
                    if p < 0:
                        return -1
                else:
                    p += 1
                break
            if c != (RBRACE if stack & 1 else RBRACK):
                return -1
            depth -= 1
            stack >>= 1
            p += 1


@jit
def key_index(b, s, e, names, name_ends, count):
    """Index of ``b[s:e]`` among ``count`` names packed in ``names`` (ends in ``name_ends``), else -1."""
    start = 0
    for i in range(count):
        end = name_ends[i]
        if end - start == e - s:
            same = True
            for k in range(e - s):
                if names[start + k] != b[s + k]:
                    same = False
                    break
            if same:
                return i
        start = end
    return -1


@jit
def string_index(b, p, end, length, names, name_ends, count):
    """Index among ``names`` of the string at ``p`` (its end and decoded length from :func:`scan_string`), else -1.

    Bytes are compared as they lie unless the string has escapes (then it is shorter decoded).
    """
    if length == end - p - 2:
        return key_index(b, p + 1, end - 1, names, name_ends, count)
    start = 0
    for i in range(count):
        if same_decoded(b, p + 1, end - 1, names, start, name_ends[i]):
            return i
        start = name_ends[i]
    return -1


@jit
def next_member(b, p, e):
    """After a member's value at ``p``: ``(next key, 0)``, ``(after the closing brace, 1)``, ``(-1, 2)`` if not taken.

    ``p`` -1 (the value was not taken) gives ``(-1, 2)``, so object walks need one exit test.
    """
    if p < 0:
        return -1, 2
    p = skip_ws(b, p, e)
    if p >= e:
        return -1, 2
    if b[p] == COMMA:
        p = skip_ws(b, p + 1, e)
        return (p, 0) if p < e and b[p] == QUOTE else (-1, 2)
    if b[p] == RBRACE:
        return p + 1, 1
    return -1, 2


@jit
def open_object(b, p, e):
    """At ``{``: ``(first key, 0)``, ``(after an empty object, 1)``, or ``(-1, 2)``."""
    if p >= e or b[p] != LBRACE:
        return -1, 2
    p = skip_ws(b, p + 1, e)
    if p < e and b[p] == RBRACE:
        return p + 1, 1
    return (p, 0) if p < e and b[p] == QUOTE else (-1, 2)


@jit
def member(b, t, p, e, names, name_ends, count, seen, unknown_null_only):
    """The member whose key starts at ``p``: ``(key index, position, seen keys)``.

    A known key (index in ``names``) gives the position of its value; a repeated one is not taken
    (the last value wins there). An unknown key's value is checked and skipped: index -1 and the
    position after it (with ``unknown_null_only`` the value must be ``null``). Not taken: ``(-2, -1, seen)``.
    """
    end, length = string_at(b, t, p, e, True)
    if end < 0:
        return -2, -1, seen
    index = string_index(b, p, end, length, names, name_ends, count)
    q = skip_ws(b, end, e)
    if q >= e or b[q] != COLON:
        return -2, -1, seen
    q = skip_ws(b, q + 1, e)
    if q >= e:
        return -2, -1, seen
    if index >= 0:
        if (seen >> index) & 1:
            return -2, -1, seen
        return index, q, seen | (1 << index)
    if unknown_null_only:
        return (-1, q + 4, seen) if is_null(b, q, e) else (-2, -1, seen)
    return -1, skip_value(b, t, q, e, True), seen
