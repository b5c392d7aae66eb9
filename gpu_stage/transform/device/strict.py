"""Strict JSON checks for the device lane: what the lane says of a body it does not take.

When the lenient scan (:mod:`gpu_stage.transform.device.scan`) gives up on a body, :func:`body_verdict`
walks it as the native core's reader does (every escape, any number) and says whether it is
certainly not JSON, not UTF-8 or not an object: those dead letters are the lane's to write.
Anything else (``V_UNKNOWN``) goes to the native core, which decides.

Same source for CUDA and the CPU (see :mod:`gpu_stage.transform.device.scan`).
"""

# mypy: disable-error-code="no-untyped-def"
# ruff: noqa: C901, SIM109
from __future__ import annotations

from typing import Any

if "skip_ws" not in globals():  # a plain import; compile_lane runs the sources in order, jitted
    from gpu_stage.transform.device.scan import (
        COLON,
        COMMA,
        LBRACE,
        LBRACK,
        MAX_DEPTH,
        QUOTE,
        RBRACE,
        RBRACK,
        digits,
        is_utf8,
        literal,
        skip_ws,
        string_at,
    )


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)

# The strict verdict on a text the lane's subset did not take (semantics §1 checks 2 and 3, §4 step 3).
V_UNKNOWN = 0  # a valid object, or the lane cannot tell (deep nesting, a number that may overflow)
V_NOT_OBJECT = 1  # valid JSON whose top-level value is not an object
V_INVALID_JSON = 2  # not one strict JSON text
V_INVALID_UTF8 = 3  # not UTF-8 (a body only)


@jit
def strict_string_end(b, t, p, e):
    """End of the string whose opening quote is at ``p``, every escape allowed and checked; -1 if invalid.

    The lenient scan checks a string by the same rules as the native core's reader (every escape,
    no lone surrogate, UTF-8, no control byte), so its answer is taken, from the body's marks ``t``
    where it has them (empty for other text: the bytes are read).
    """
    end, _ = string_at(b, t, p, e, True)
    return end


@jit
def strict_number(b, p, e):
    """The number at ``p`` checked as grammar only: ``(end or -1, whether it may overflow a double)``.

    A nonzero value is below ``10**bound`` with ``bound`` its integer digits (0 when the integer part
    is 0) plus its exponent, so a bound up to 308 is finite for certain; above, only a correctly
    rounded parse can tell, and the native core decides.
    """
    if b[p] == 45:
        p += 1
    if p >= e or not 48 <= b[p] <= 57:
        return -1, False
    lead = p
    if b[p] == 48:
        p += 1
        if p < e and 48 <= b[p] <= 57:
            return -1, False  # a leading zero
    else:
        p = digits(b, p, e)
    bound = 0 if b[lead] == 48 else p - lead
    nonzero = bound > 0
    if p < e and b[p] == 46:
        end = digits(b, p + 1, e)
        if end == p + 1:
            return -1, False
        for k in range(p + 1, end):
            nonzero = nonzero or b[k] != 48
        p = end
    if p < e and (b[p] == 101 or b[p] == 69):
        p += 1
        sign = 1
        if p < e and (b[p] == 45 or b[p] == 43):
            sign = -1 if b[p] == 45 else 1
            p += 1
        end = digits(b, p, e)
        if end == p:
            return -1, False
        exp10 = 0
        for k in range(p, end):
            exp10 = min(exp10 * 10 + (int(b[k]) - 48), 1 << 40)
        bound += sign * exp10
        p = end
    return p, nonzero and bound > 308


@jit
def strict_member(b, t, p, e):
    """After an object's ``{`` or ``,`` (``p``): the position of the next member's value, or -1."""
    p = skip_ws(b, p, e)
    if p >= e or b[p] != QUOTE:
        return -1
    p = strict_string_end(b, t, p, e)
    if p < 0:
        return -1
    p = skip_ws(b, p, e)
    if p >= e or b[p] != COLON:
        return -1
    return skip_ws(b, p + 1, e)


@jit
def strict_scalar(b, t, p, e):
    """The string, number or literal at ``p``: ``(end or -1, whether it may overflow a double)``."""
    c = b[p]
    if c == QUOTE:
        return strict_string_end(b, t, p, e), False
    if c == 45 or 48 <= c <= 57:
        return strict_number(b, p, e)
    end, _ = literal(b, p, e)
    return end, False


@jit
def strict_value(b, t, p, e):
    """The value at ``p`` checked as the native core's reader does: ``(end, whether a number may overflow)``.

    End -1: not JSON; -2: nested deeper than :data:`MAX_DEPTH` (the native core decides). Shaped
    as :func:`skip_value`, with every escape and number allowed.
    """
    depth = 0
    stack = 0
    big = False
    while True:
        p = skip_ws(b, p, e)
        if p >= e:
            return -1, big
        c = b[p]
        if c == LBRACE or c == LBRACK:
            if depth >= MAX_DEPTH:
                return -2, big
            depth += 1
            stack = (stack << 1) | (1 if c == LBRACE else 0)
            p = skip_ws(b, p + 1, e)
            if p >= e:
                return -1, big
            if b[p] != (RBRACE if c == LBRACE else RBRACK):
                if c == LBRACE:
                    p = strict_member(b, t, p, e)
                    if p < 0:
                        return -1, big
                continue
            depth -= 1
            stack >>= 1
            p += 1
        else:
            p, overflows = strict_scalar(b, t, p, e)
            if p < 0:
                return -1, big
            big = big or overflows
        # p is after a complete value: close containers or move to the next member.
        while True:
            if depth == 0:
                return p, big
            p = skip_ws(b, p, e)
            if p >= e:
                return -1, big
            c = b[p]
            if c == COMMA:
                if stack & 1:
                    p = strict_member(b, t, p + 1, e)
                    if p < 0:
                        return -1, big
                else:
                    p += 1
                break
            if c != (RBRACE if stack & 1 else RBRACK):
                return -1, big
            depth -= 1
            stack >>= 1
            p += 1


@jit
def json_verdict(b, t, s, e):
    """``V_*`` for the UTF-8 text ``b[s:e]``: what the native core's strict reader makes of it, where certain.

    ``t``: the body's string marks when ``b[s:e]`` is a body, else empty (strings are then read here).
    """
    p = skip_ws(b, s, e)
    if p >= e:
        return V_INVALID_JSON
    end, big = strict_value(b, t, p, e)
    if end == -2:
        return V_UNKNOWN
    if end < 0 or skip_ws(b, end, e) != e:
        return V_INVALID_JSON
    if big or b[p] == LBRACE:
        return V_UNKNOWN
    return V_NOT_OBJECT


@jit
def body_verdict(b, t, s, e):
    """``V_*`` for a whole body, marks ``t``: UTF-8 first (semantics §1 check 2 names that apart), then JSON."""
    return json_verdict(b, t, s, e) if is_utf8(b, s, e) else V_INVALID_UTF8
