"""The device lane's walk of one vLLM body: envelope, choices, message, tool calls, usage.

:func:`body` walks a body once, checks everything ``gpu_stage/transform/contract/semantics.md``
asks of a good row and records where each value lies (:mod:`gpu_stage.transform.device.slots`); it
decodes the first choice's content and tool arguments in place (a decoded string is never longer
than its JSON spelling). It takes the common shape only: at most one choice, no ``metadata``
object, no unknown top-level key with a non-null value, integer ``created``, tool arguments that are
a flat object (or not an object at all). Anything else is left to the native core.

Same source for CUDA and the CPU (see :mod:`gpu_stage.transform.device.scan`).
"""

# mypy: disable-error-code="no-untyped-def"
# ruff: noqa: C901, PLR0915
from __future__ import annotations

from typing import Any

if "skip_ws" not in globals():  # a plain import; compile_lane runs the sources in order, jitted
    from gpu_stage.transform.device.record import (
        NULL_INT,
    )
    from gpu_stage.transform.device.scan import (
        BSLASH,
        COMMA,
        LBRACE,
        LBRACK,
        QUOTE,
        RBRACE,
        RBRACK,
        copy_string,
        is_null,
        key_index,
        literal,
        member,
        next_member,
        open_object,
        scan_number,
        scan_string,
        skip_value,
        skip_ws,
    )
    from gpu_stage.transform.device.slots import (
        CACHED,
        CALL_ENDS,
        CALL_NAMES,
        CHOICE_ENDS,
        CHOICE_NAMES,
        CONTENT,
        CONTENT_STATE,
        CREATED,
        DELTA_AT,
        DETAIL_ENDS,
        DETAIL_NAMES,
        E_TYPE,
        ERROR_BODY_ENDS,
        ERROR_BODY_NAMES,
        FINGERPRINT,
        FINISH,
        FUNCTION_ENDS,
        FUNCTION_NAMES,
        ID,
        INDEX,
        MESSAGE_AT,
        MESSAGE_ENDS,
        MESSAGE_NAMES,
        MODEL,
        NUM_CHOICES,
        OBJECT,
        OBJECT_ENDS,
        OBJECT_NAMES,
        PROMPT,
        REASONING,
        REASONING_CONTENT,
        SLOT_COUNT,
        STOP,
        TEXT_AT,
        TIER,
        TOOL_ARGS,
        TOOL_MODE,
        TOOL_NAME,
        TOOL_VALID,
        TOP_ENDS,
        TOP_NAMES,
        USAGE_ENDS,
        USAGE_NAMES,
    )


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)

@jit
def read_string(b, p, e, slots, r, slot):
    """A string-or-null value at ``p`` into a string slot; the end of the value, or -1."""
    if b[p] == QUOTE:
        end, decoded = scan_string(b, p, e, True)
        if end < 0:
            return -1
        slots[r, slot] = p + 1
        slots[r, slot + 1] = end - 1
        slots[r, slot + 2] = decoded
        return end
    if is_null(b, p, e):
        slots[r, slot] = -1
        return p + 4
    return -1


@jit
def read_int(b, p, e, slots, r, slot, low, high):
    """An integer-or-null value at ``p`` within ``[low, high]`` into an int slot; its end, or -1."""
    if is_null(b, p, e):
        slots[r, slot] = NULL_INT
        return p + 4
    end, kind, value, _ = scan_number(b, p, e)
    if kind != 1 or value < low or value > high:
        return -1
    slots[r, slot] = value
    return end


@jit
def on_usage(b, p, e, index, slots, r, sc):
    """A member of ``usage``: the three token counts and the details object."""
    if index < 3:
        return read_int(b, p, e, slots, r, PROMPT + index, NULL_INT + 1, -(NULL_INT + 1))
    if is_null(b, p, e):
        return p + 4
    p, closed = open_object(b, p, e)
    seen = 0
    while closed == 0:
        index, p, seen = member(b, p, e, DETAIL_NAMES, DETAIL_ENDS, 1, seen, False)
        if index >= 0:
            p = read_int(b, p, e, slots, r, CACHED, NULL_INT + 1, -(NULL_INT + 1))
        p, closed = next_member(b, p, e)
    return p


@jit
def flat_object(sc, p, e):
    """Check the flat JSON object ``sc[p:e]`` and compact it in place; its compact length, or -1.

    Taken: scalar values, distinct keys, no escapes, integers only; compacting drops whitespace outside
    strings, which is orjson's spelling for such an object.
    """
    start = p
    p = skip_ws(sc, p + 1, e)
    w = start + 1
    if p < e and sc[p] == RBRACE:
        p += 1
    else:
        while True:
            if p >= e or sc[p] != QUOTE:
                return -1
            key_end, _ = scan_string(sc, p, e, False)
            if key_end < 0:
                return -1
            # A repeated key keeps its first position but its last value: not for the lane.
            q = start + 1
            while q < w:
                kq_end, _ = scan_string(sc, q, w, False)
                if kq_end - q == key_end - p:
                    same = True
                    for k in range(key_end - p):
                        if sc[q + k] != sc[p + k]:
                            same = False
                            break
                    if same:
                        return -1
                q = kq_end + 1
                while q < w and sc[q] != COMMA:
                    q = scalar_skip_compact(sc, q, w)
                q += 1
            for k in range(p, key_end):
                sc[w] = sc[k]
                w += 1
            p = skip_ws(sc, key_end, e)
            if p >= e or sc[p] != 58:
                return -1
            sc[w] = 58
            w += 1
            p = skip_ws(sc, p + 1, e)
            if p >= e:
                return -1
            c = sc[p]
            if c == QUOTE:
                end, _ = scan_string(sc, p, e, False)
            elif c == 45 or 48 <= c <= 57:
                end, kind, value, _ = scan_number(sc, p, e)
                if kind != 1 or (value == 0 and c == 45):
                    return -1
            else:
                end, _ = literal(sc, p, e)
            if end < 0:
                return -1
            for k in range(p, end):
                sc[w] = sc[k]
                w += 1
            p = skip_ws(sc, end, e)
            if p < e and sc[p] == COMMA:
                sc[w] = COMMA
                w += 1
                p = skip_ws(sc, p + 1, e)
                continue
            if p < e and sc[p] == RBRACE:
                p += 1
                break
            return -1
    if skip_ws(sc, p, e) != e:
        return -1
    sc[w] = RBRACE
    return w + 1 - start


@jit
def scalar_skip_compact(sc, q, w):
    """In already compacted text, the end of the scalar at ``q`` (a string or a bare token)."""
    if sc[q] == QUOTE:
        end, _ = scan_string(sc, q, w, False)
        return end
    while q < w and sc[q] != COMMA:
        q += 1
    return q


@jit
def tool_arguments(b, p, e, slots, r, sc):
    """``function.arguments``: compact JSON text of a flat object, or the string as sent; end, or -1."""
    if is_null(b, p, e):
        slots[r, TOOL_ARGS] = -1
        slots[r, TOOL_VALID] = -1
        return p + 4
    end = read_string(b, p, e, slots, r, TOOL_ARGS)
    if end < 0:
        return -1
    s = slots[r, TOOL_ARGS]
    decoded_end = copy_string(b, s, end - 1, sc, s)
    first = skip_ws(sc, s, decoded_end)
    if first >= decoded_end or sc[first] != LBRACE:
        slots[r, TOOL_VALID] = 0
        slots[r, TOOL_MODE] = 0
        return end
    length = flat_object(sc, first, decoded_end)
    if length < 0:
        return -1
    slots[r, TOOL_ARGS] = first
    slots[r, TOOL_ARGS + 1] = first + length
    slots[r, TOOL_ARGS + 2] = length
    slots[r, TOOL_VALID] = 1
    slots[r, TOOL_MODE] = 1
    return end


@jit
def on_call(b, p, e, slots, r, sc):
    """The first tool call's ``function`` (null or absent: no tool columns)."""
    if is_null(b, p, e):
        return p + 4
    p, closed = open_object(b, p, e)
    seen = 0
    while closed == 0:
        index, p, seen = member(b, p, e, FUNCTION_NAMES, FUNCTION_ENDS, 2, seen, False)
        if index == 0:
            p = read_string(b, p, e, slots, r, TOOL_NAME)
        elif index == 1:
            p = tool_arguments(b, p, e, slots, r, sc)
        p, closed = next_member(b, p, e)
    return p


@jit
def tool_calls(b, p, e, slots, r, sc):
    """``tool_calls``: null, ``[]``, or calls of which the first fills the tool columns."""
    if is_null(b, p, e):
        return p + 4
    if b[p] != LBRACK:
        return -1
    q = skip_ws(b, p + 1, e)
    if q < e and b[q] == RBRACK:
        return q + 1
    if q >= e or b[q] != LBRACE:
        return -1
    q, closed = open_object(b, q, e)
    seen = 0
    while closed == 0:
        index, q, seen = member(b, q, e, CALL_NAMES, CALL_ENDS, 1, seen, False)
        if index >= 0:
            q = on_call(b, q, e, slots, r, sc)
        q, closed = next_member(b, q, e)
    if q < 0:
        return -1
    q = skip_ws(b, q, e)
    if q < e and b[q] == RBRACK:
        return q + 1
    if q >= e or b[q] != COMMA:
        return -1
    # The other calls are not columns, but must be valid JSON: skip them as one array.
    return skip_value(b, p, e, True)


@jit
def message(b, p, e, slots, r, sc):
    """The first choice's message (or delta) object: content, reasoning, tool calls; its end, or -1."""
    slots[r, REASONING_CONTENT] = -1
    p, closed = open_object(b, p, e)
    seen = 0
    while closed == 0:
        index, p, seen = member(b, p, e, MESSAGE_NAMES, MESSAGE_ENDS, 4, seen, False)
        if index == 0:
            p = read_string(b, p, e, slots, r, CONTENT)
        elif index == 1:
            p = read_string(b, p, e, slots, r, REASONING)
        elif index == 2:
            p = read_string(b, p, e, slots, r, REASONING_CONTENT)
        elif index == 3:
            p = tool_calls(b, p, e, slots, r, sc)
        p, closed = next_member(b, p, e)
    return p


@jit
def on_choice(b, p, e, index, slots, r, sc):
    """A member of the first choice; message, delta and text are only located here (see :func:`choice`)."""
    if index == 0:
        return read_int(b, p, e, slots, r, INDEX, -2147483648, 2147483647)
    if index == 1:
        return read_string(b, p, e, slots, r, FINISH)
    if index == 5:
        if b[p] == QUOTE:
            return read_string(b, p, e, slots, r, STOP)
        if is_null(b, p, e):
            slots[r, STOP] = -1
            return p + 4
        end, kind, value, _ = scan_number(b, p, e)
        if kind != 1 or (value == 0 and b[p] == 45):
            return -1
        slots[r, STOP] = p
        slots[r, STOP + 1] = end
        slots[r, STOP + 2] = end - p
        return end
    slots[r, MESSAGE_AT + index - 2] = p
    return skip_value(b, p, e, True)


@jit
def choice(b, p, e, slots, r, sc):
    """The first choice: its columns, then the content from message, else delta, else text."""
    slots[r, MESSAGE_AT] = -1
    slots[r, DELTA_AT] = -1
    slots[r, TEXT_AT] = -1
    end, closed = open_object(b, p, e)
    seen = 0
    while closed == 0:
        index, end, seen = member(b, end, e, CHOICE_NAMES, CHOICE_ENDS, 6, seen, False)
        if index >= 0:
            end = on_choice(b, end, e, index, slots, r, sc)
        end, closed = next_member(b, end, e)
    if end < 0:
        return -1
    holder = slots[r, MESSAGE_AT] if slots[r, MESSAGE_AT] >= 0 else slots[r, DELTA_AT]
    if holder >= 0:
        if is_null(b, holder, e):
            return end
        if message(b, holder, e, slots, r, sc) < 0:
            return -1
        if slots[r, REASONING] < 0:
            for k in range(3):
                slots[r, REASONING + k] = slots[r, REASONING_CONTENT + k]
        return end
    text = slots[r, TEXT_AT]
    if text >= 0 and read_string(b, text, e, slots, r, CONTENT) < 0:
        return -1
    return end


@jit
def choices(b, p, e, slots, r, sc):
    """``choices``: an array of at most one choice (more are left to the native core)."""
    if b[p] != LBRACK:
        return -1
    q = skip_ws(b, p + 1, e)
    if q < e and b[q] == RBRACK:
        slots[r, NUM_CHOICES] = 0
        return q + 1
    q = choice(b, q, e, slots, r, sc)
    if q < 0:
        return -1
    q = skip_ws(b, q, e)
    if q >= e or b[q] != RBRACK:
        return -1
    slots[r, NUM_CHOICES] = 1
    return q + 1


@jit
def on_top(b, p, e, index, slots, r, sc):
    """A member of the top-level object (index in :data:`TOP_KEYS`)."""
    if index == 0 or index == 1:
        if b[p] != QUOTE:
            return -1
        return read_string(b, p, e, slots, r, ID if index == 0 else OBJECT)
    if index == 2:
        end, kind, value, _ = scan_number(b, p, e)
        if kind != 1 or value < 0 or value > 9223372036854775:
            return -1
        slots[r, CREATED] = value * 1000
        return end
    if index == 3:
        return read_string(b, p, e, slots, r, MODEL)
    if index == 4:
        return choices(b, p, e, slots, r, sc)
    if index == 5:
        if is_null(b, p, e):
            return p + 4
        p, closed = open_object(b, p, e)
        seen = 0
        while closed == 0:
            index, p, seen = member(b, p, e, USAGE_NAMES, USAGE_ENDS, 4, seen, False)
            if index >= 0:
                p = on_usage(b, p, e, index, slots, r, sc)
            p, closed = next_member(b, p, e)
        return p
    if index == 6:
        return read_string(b, p, e, slots, r, FINGERPRINT)
    if index == 7:
        return read_string(b, p, e, slots, r, TIER)
    if index == 8:
        return p + 4 if is_null(b, p, e) else -1
    return skip_value(b, p, e, True)


@jit
def clear_row(slots, r):
    """Every column null (a string slot's start -1, an int slot :data:`NULL_INT`)."""
    for k in range(SLOT_COUNT):
        slots[r, k] = -1
    for k in range(PROMPT, CACHED + 1):
        slots[r, k] = NULL_INT
    slots[r, INDEX] = NULL_INT
    slots[r, CREATED] = -1
    slots[r, NUM_CHOICES] = -1
    slots[r, CONTENT_STATE] = 0
    slots[r, TOOL_MODE] = 0


@jit
def body(b, s, e, slots, r, sc):
    """Walk one body ``b[s:e]``; True when it is a good row the lane takes."""
    clear_row(slots, r)
    p, closed = open_object(b, skip_ws(b, s, e), e)
    seen = 0
    while closed == 0:
        index, p, seen = member(b, p, e, TOP_NAMES, TOP_ENDS, 11, seen, True)
        if index >= 0:
            p = on_top(b, p, e, index, slots, r, sc)
        p, closed = next_member(b, p, e)
    if p < 0 or skip_ws(b, p, e) != e:
        return False
    if slots[r, ID] < 0 or slots[r, CREATED] < 0 or slots[r, NUM_CHOICES] < 0:
        return False
    o = slots[r, OBJECT]
    return o >= 0 and object_kind(b, o, slots[r, OBJECT + 1]) >= 0


@jit
def object_kind(b, s, e):
    """Index of ``b[s:e]`` among the supported ``object`` values (escapes never match), else -1."""
    for k in range(s, e):
        if b[k] == BSLASH:
            return -1
    start = 0
    for i in range(3):
        end = OBJECT_ENDS[i]
        if end - start == e - s:
            same = True
            for k in range(e - s):
                if OBJECT_NAMES[start + k] != b[s + k]:
                    same = False
                    break
            if same:
                return i
        start = end
    return -1


@jit
def wrong_type(sc, p, e):
    """A value of the wrong type at ``p``: ``(its end, E_TYPE)`` once it is checked as JSON, else ``(-1, 0)``."""
    end = skip_value(sc, p, e, True)
    return (end, E_TYPE) if end >= 0 else (-1, 0)


@jit
def error_body(b, s, e):
    """Whether ``b[s:e]`` is an object of strict JSON that semantics §1 check 4 calls an error body.

    ``object`` is ``"error"`` or ``error`` is present and not null. Such a body is an upstream error
    whatever its other members hold (checks 5 to 8 come after), so every value is only checked as
    JSON here. False also when the lane cannot tell: JSON outside its subset, a repeated key.
    """
    p, closed = open_object(b, skip_ws(b, s, e), e)
    seen = 0
    error = False
    while closed == 0:
        index, p, seen = member(b, p, e, ERROR_BODY_NAMES, ERROR_BODY_ENDS, 2, seen, False)
        if index == 0:
            error = error or is_error_string(b, p, e)
        elif index == 1:
            error = error or not is_null(b, p, e)
        if index >= 0:
            p = skip_value(b, p, e, True)
        p, closed = next_member(b, p, e)
    return p >= 0 and skip_ws(b, p, e) == e and error


@jit
def is_error_string(b, p, e):
    """Whether the value at ``p`` is the string ``"error"`` (an escape never spells a letter of it)."""
    if b[p] != QUOTE:
        return False
    end, _ = scan_string(b, p, e, True)
    return end >= 0 and key_index(b, p + 1, end - 1, ERROR_BODY_NAMES, ERROR_BODY_ENDS, 2) == 1
