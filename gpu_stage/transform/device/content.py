"""The device lane's content check: the model's JSON in ``message.content`` against the content schema.

The content schema reaches the device as arrays (:class:`gpu_stage.transform.device.tables.ContentTables`),
so one compiled kernel serves every schema. :func:`content_state` parses the decoded content in
place and says whether it is prose, valid, or invalid with which error (semantics §4); a shape the
tables cannot express (``F_SLOW``) leaves the row to the native core.

Same source for CUDA and the CPU (see :mod:`gpu_stage.transform.device.scan`).
"""

# mypy: disable-error-code="no-untyped-def"
# ruff: noqa: C901
from __future__ import annotations

from typing import Any

if "skip_ws" not in globals():  # a plain import; compile_lane runs the sources in order, jitted
    from gpu_stage.transform.device.scan import (
        COMMA,
        LBRACE,
        LBRACK,
        MAX_EXACT,
        QUOTE,
        RBRACK,
        literal,
        next_member,
        open_object,
        same_decoded,
        scan_number,
        scan_string,
        skip_value,
        skip_ws,
        string_index,
        trim_end,
    )
    from gpu_stage.transform.device.slots import (
        E_ADDITIONAL,
        E_ENUM,
        E_INVALID_JSON,
        E_ITEMS,
        E_MAXIMUM,
        E_MINIMUM,
        E_MISSING,
        E_NOT_OBJECT,
        E_TYPE,
        ERROR_AT,
        ERROR_CODE,
        ERROR_END,
        F_ENUM,
        F_MAX,
        F_MAX_INT,
        F_MIN,
        F_MIN_INT,
        F_SLOW,
        P_ARRAY,
        P_ENUM_FIRST,
        P_ENUM_LAST,
        P_FLAGS,
        P_KIND,
        P_MAX_I,
        P_MIN_I,
        P_REQUIRED,
    )
    from gpu_stage.transform.device.strict import (
        V_INVALID_JSON,
        V_NOT_OBJECT,
        json_verdict,
    )
    from gpu_stage.transform.device.walk import (
        wrong_type,
    )


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)

@jit
def content_scalar(sc, p, e, j, ptab, pmin, pmax, enames, eends, r, cs, ce, cv, cd):
    """One scalar of content property ``j`` at ``p`` (an array item too): ``(end, error code or 0)``.

    ``(-1, 0)`` when not taken (the native core decides): JSON outside the lane's subset, a double
    for an integer property, a comparison the lane cannot make
    exactly. A failed check gives the value's end and the code of semantics §4.
    """
    kind = ptab[j, P_KIND]
    c = sc[p]
    if kind == 0:
        if c != QUOTE:
            return wrong_type(sc, p, e)
        end, length = scan_string(sc, p, e, True)
        if end < 0:
            return -1, 0
        if (ptab[j, P_FLAGS] & F_ENUM) and not in_enum(sc, p + 1, end - 1, j, ptab, enames, eends):
            return end, E_ENUM
        cs[r, j] = p + 1
        ce[r, j] = end - 1
        cv[r, j] = length  # decoded bytes: the string is written from its JSON spelling
        return end, 0
    if kind == 3:
        end, value = literal(sc, p, e)
        if end < 0:
            return wrong_type(sc, p, e)
        if value < 0:
            return end, E_TYPE
        cv[r, j] = value
        return end, 0
    if not (c == 45 or 48 <= c <= 57):
        return wrong_type(sc, p, e)
    end, num, ivalue, dvalue = scan_number(sc, p, e)
    if end < 0:
        return -1, 0
    if kind == 2:
        if num != 1:
            return -1, 0
        code = int_bounds(ivalue, j, ptab, pmin, pmax)
        if code == 0:
            cv[r, j] = ivalue
        return (end, code) if code >= 0 else (-1, 0)
    if num == 1:
        if ivalue >= MAX_EXACT or ivalue <= -MAX_EXACT:
            return -1, 0
        dvalue = float(ivalue)
    elif num != 2:
        return -1, 0
    flags = ptab[j, P_FLAGS]
    if (flags & F_MIN) and dvalue < pmin[j]:
        return end, E_MINIMUM
    if (flags & F_MAX) and dvalue > pmax[j]:
        return end, E_MAXIMUM
    cd[r, j] = dvalue
    return end, 0


@jit
def int_bounds(value, j, ptab, pmin, pmax):
    """An integer property value against its minimum, then its maximum: 0, ``E_MINIMUM``, ``E_MAXIMUM``.

    -1 when a bound is a double the value cannot be compared with exactly here.
    """
    flags = ptab[j, P_FLAGS]
    inexact = value >= MAX_EXACT or value <= -MAX_EXACT
    if flags & F_MIN:
        if flags & F_MIN_INT:
            if value < ptab[j, P_MIN_I]:
                return E_MINIMUM
        elif inexact:
            return -1
        elif float(value) < pmin[j]:
            return E_MINIMUM
    if flags & F_MAX:
        if flags & F_MAX_INT:
            if value > ptab[j, P_MAX_I]:
                return E_MAXIMUM
        elif inexact:
            return -1
        elif float(value) > pmax[j]:
            return E_MAXIMUM
    return 0


@jit
def in_enum(sc, s, e, j, ptab, enames, eends):
    """Whether the string body ``sc[s:e]``, decoded, is one of property ``j``'s string enum values."""
    first = ptab[j, P_ENUM_FIRST]
    start = eends[first - 1] if first > 0 else 0
    for i in range(first, ptab[j, P_ENUM_LAST]):
        end = eends[i]
        if same_decoded(sc, s, e, enames, start, end):
            return True
        start = end
    return False


@jit
def content_value(sc, p, e, j, ptab, pmin, pmax, enames, eends, r, cs, ce, cv, cd):
    """The value of content property ``j`` at ``p``, a scalar or an array of them: ``(end, error code or 0)``.

    A valid array keeps its span and count; an array with an item of the wrong type is ``E_ITEMS``.
    ``(-1, 0)`` when not taken.
    """
    if ptab[j, P_FLAGS] & F_SLOW:
        return -1, 0
    if not ptab[j, P_ARRAY]:
        end, code = content_scalar(sc, p, e, j, ptab, pmin, pmax, enames, eends, r, cs, ce, cv, cd)
        if end >= 0 and code == 0 and ptab[j, P_KIND] != 0:
            cs[r, j] = p
            ce[r, j] = end
        return end, code
    if sc[p] != LBRACK:
        return wrong_type(sc, p, e)
    q = skip_ws(sc, p + 1, e)
    count = 0
    error = 0
    if q < e and sc[q] == RBRACK:
        q += 1
    else:
        while True:
            if q >= e:
                return -1, 0
            q, code = content_scalar(sc, q, e, j, ptab, pmin, pmax, enames, eends, r, cs, ce, cv, cd)
            if q < 0:
                return -1, 0
            if code != 0:
                error = E_ITEMS
            count += 1
            q = skip_ws(sc, q, e)
            if q < e and sc[q] == COMMA:
                q = skip_ws(sc, q + 1, e)
                continue
            if q < e and sc[q] == RBRACK:
                q += 1
                break
            return -1, 0
    cs[r, j] = p
    ce[r, j] = q
    cv[r, j] = count
    return q, error


@jit
def content_object(
    sc, p, e, ptab, pnames, pends, nprops, required, closed_schema, pmin, pmax, enames, eends, slots, r, cs, ce, cv, cd
):
    """The content object ``sc[p:e]`` against the schema: 1 valid, 2 invalid (error in the slots), -1 not taken.

    The whole object is checked as JSON first (invalid JSON is the native core's), then the first
    violation is the one semantics §4 names: a missing required property (in ``required``'s order),
    an additional key (body order), then each present property's check in schema order.
    """
    if required < 0:
        return -1
    for j in range(nprops):
        cs[r, j] = -1
    q, closed = open_object(sc, p, e)
    seen = 0
    failed = 0
    extra_at = -1
    extra_end = -1
    while closed == 0:
        end, length = scan_string(sc, q, e, True)
        if end < 0:
            return -1
        j = string_index(sc, q, end, length, pnames, pends, nprops)
        key = q + 1
        q = skip_ws(sc, end, e)
        if q >= e or sc[q] != 58:
            return -1
        q = skip_ws(sc, q + 1, e)
        if q >= e:
            return -1
        if j < 0:
            if closed_schema and extra_at < 0:
                extra_at = key
                extra_end = end - 1
            q = skip_value(sc, sc[:0], q, e, True)
        else:
            if (seen >> j) & 1:
                return -1
            seen |= 1 << j
            q, code = content_value(sc, q, e, j, ptab, pmin, pmax, enames, eends, r, cs, ce, cv, cd)
            if code != 0:
                failed |= 1 << j
                cv[r, j] = code  # the content is not written: its slot holds the error code
        q, closed = next_member(sc, q, e)
    if q < 0 or skip_ws(sc, q, e) != e:
        return -1
    return content_verdict(ptab, nprops, required, seen, failed, extra_at, extra_end, slots, r, cv)


@jit
def content_verdict(ptab, nprops, required, seen, failed, extra_at, extra_end, slots, r, cv):
    """1 when nothing failed; else 2 with the first violation's error in the row's slots."""
    missing = required & ~seen
    if missing == 0 and extra_at < 0 and failed == 0:
        return 1
    if missing != 0:
        first = -1
        for j in range(nprops):
            if (missing >> j) & 1 and (first < 0 or ptab[j, P_REQUIRED] < ptab[first, P_REQUIRED]):
                first = j
        slots[r, ERROR_CODE] = E_MISSING
        slots[r, ERROR_AT] = first
    elif extra_at >= 0:
        slots[r, ERROR_CODE] = E_ADDITIONAL
        slots[r, ERROR_AT] = extra_at
        slots[r, ERROR_END] = extra_end
    else:
        j = 0
        while not (failed >> j) & 1:
            j += 1
        slots[r, ERROR_CODE] = cv[r, j]
        slots[r, ERROR_AT] = j
    return 2


@jit
def content_state(
    sc, s, e, ptab, pnames, pends, nprops, required, closed_schema, pmin, pmax, enames, eends, slots, r, cs, ce, cv, cd
):
    """Semantics §4 on the decoded content ``sc[s:e]``: 0 prose, 1 valid, 2 invalid, -1 not taken."""
    p = skip_ws(sc, s, e)
    q = e
    if p + 3 <= e and sc[p] == 96 and sc[p + 1] == 96 and sc[p + 2] == 96:
        while p < e and sc[p] != 10:
            p += 1
        if p >= e:
            return 0
        p += 1
        q = trim_end(sc, p, e)
        if q - p >= 3 and sc[q - 1] == 96 and sc[q - 2] == 96 and sc[q - 3] == 96:
            q -= 3
        p = skip_ws(sc, p, q)
    q = trim_end(sc, p, q)
    if p >= q:
        return 0
    if sc[p] == LBRACK:  # not an object when it is JSON at all
        return content_outside(sc, p, q, slots, r)
    if sc[p] != LBRACE:
        return 0
    state = content_object(
        sc, p, q, ptab, pnames, pends, nprops, required, closed_schema, pmin, pmax, enames, eends, slots, r, cs, ce, cv,
        cd,
    )  # fmt: skip
    return state if state >= 0 else content_outside(sc, p, q, slots, r)


@jit
def content_outside(sc, p, q, slots, r):
    """Content ``sc[p:q]``, an array or an object outside the lane's subset: 2 when it is not JSON or not an object.

    Semantics §4 checks JSON (step 3) before the schema, and ``not_an_object`` first among the
    schema's checks, so neither needs the rest of the walk; a valid object is the native core's (-1).
    """
    verdict = json_verdict(sc, sc[:0], p, q)
    if verdict == V_INVALID_JSON:
        slots[r, ERROR_CODE] = E_INVALID_JSON
        return 2
    if verdict == V_NOT_OBJECT:
        slots[r, ERROR_CODE] = E_NOT_OBJECT
        return 2
    return -1
