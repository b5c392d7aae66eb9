"""The device lane's per-body work: walk one vLLM body, check it, and write its Avro datum.

Pass 1 (:func:`measure_row`) walks a body once, checks everything ``gpu_stage/transform/contract/semantics.md`` asks
of a good row, records where each column's value lies (``slots``), decodes the first choice's content
and tool arguments in place (a decoded string is never longer than its JSON spelling, and the walk
never reads a string twice), parses and validates the content there, and returns the row's encoded
size, or :data:`NOT_TAKEN` when the lane does not take the body. So pass 1 changes the values it
reads: the device works on its own copy of them, and the CPU build copies them first. Pass 2
(:func:`write`) writes the datum at its offset from those slots. Both share :func:`emit`, so the
size and the bytes cannot disagree.

The lane takes the common shape only: at most one choice, no ``metadata`` object, no unknown
top-level key with a non-null value, integer ``created``, content that is prose, valid for the content
schema or rejected by it (its error text written here), tool arguments that are a flat object (or not
an object at all), and the JSON subset of :mod:`gpu_stage.transform.device.scan`. Of the dead letters it
finds those whose text is a constant: upstream error bodies (:data:`UPSTREAM_ERROR`), and bodies that
are not UTF-8, not JSON or not an object (:data:`INVALID_UTF8`, :data:`INVALID_JSON`,
:data:`NOT_AN_OBJECT`, from a strict check where the lane cannot tell otherwise). Everything else,
every other dead letter included, is :data:`NOT_TAKEN` and done by the native core.

Same source for CUDA and the CPU (see :mod:`gpu_stage.transform.device.scan`).
"""

# mypy: disable-error-code="no-untyped-def"
# ruff: noqa: C901, PLR0915, SIM109
from __future__ import annotations

import math
from typing import Any

import numpy as np

if "skip_ws" not in globals():  # a plain import; compile_lane runs this file after the jitted lane_json
    from gpu_stage.transform.device.record import (
        ATTR_COUNT,
        ATTRS,
        KEY,
        LATENCY,
        NULL_INT,
        RECORD_END,
        attribute_member,
        record_columns,
    )
    from gpu_stage.transform.device.scan import (
        BSLASH,
        COMMA,
        LBRACE,
        LBRACK,
        MAX_EXACT,
        QUOTE,
        RBRACE,
        RBRACK,
        V_INVALID_JSON,
        V_INVALID_UTF8,
        V_NOT_OBJECT,
        V_UNKNOWN,
        body_verdict,
        copy_string,
        is_null,
        json_verdict,
        key_index,
        literal,
        member,
        next_member,
        open_object,
        scan_number,
        scan_string,
        skip_value,
        skip_ws,
        trim_end,
        unescape,
    )


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)
kernel: Any = globals().get("kernel", _plain)
lane_start: Any = globals().get("lane_start", _plain)
lane_step: Any = globals().get("lane_step", _plain)

# Slots per row (int64). A string is (start, end, decoded length) in the body; start -1 is null.
ID = 0
OBJECT = 3
MODEL = 6
FINISH = 9
STOP = 12
CONTENT = 15
REASONING = 18
FINGERPRINT = 21
TIER = 24
TOOL_NAME = 27
TOOL_ARGS = 30
CREATED = 33
NUM_CHOICES = 34
INDEX = 35
PROMPT = 36
COMPLETION = 37
TOTAL = 38
CACHED = 39
CONTENT_STATE = 40  # 0 prose (content null), 1 valid, 2 invalid (its error in the ERROR_* slots)
TOOL_VALID = 41  # -1 null, 0 false, 1 true
TOOL_MODE = 42  # 0 the arguments string as sent, 1 compact JSON text (both decoded in place)
# 43 to RECORD_END: the record columns (``lane_record``).
# An invalid content's error: its code (an index in CONTENT_ERRORS) and the name it ends with: a
# property index (ERROR_AT), or for ``additional`` the key's span in the decoded content.
ERROR_CODE = RECORD_END
ERROR_AT = RECORD_END + 1
ERROR_END = RECORD_END + 2
NSLOTS = RECORD_END + 3
# Pass 1's result for a row besides its size: left to the native core, or a dead letter whose text
# is a constant: an upstream error body, or a body semantics §1 checks 2 and 3 reject (the lane's
# ``V_*`` verdict below UPSTREAM_ERROR, so ``sizes <= UPSTREAM_ERROR`` are the lane's dead letters).
NOT_TAKEN = -1
UPSTREAM_ERROR = -2
NOT_AN_OBJECT = UPSTREAM_ERROR - V_NOT_OBJECT
INVALID_JSON = UPSTREAM_ERROR - V_INVALID_JSON
INVALID_UTF8 = UPSTREAM_ERROR - V_INVALID_UTF8

# Key tables (names back to back, ends): top level, a choice, a message, usage, details, tool call,
# function. Top-level indices 0..10 are the keys semantics §2 does not copy into ``extra``.
TOP_KEYS = (
    "id",
    "object",
    "created",
    "model",
    "choices",
    "usage",
    "system_fingerprint",
    "service_tier",
    "metadata",
    "prompt_logprobs",
    "prompt_token_ids",
)
CHOICE_KEYS = ("index", "finish_reason", "message", "delta", "text", "stop_reason")
MESSAGE_KEYS = ("content", "reasoning", "reasoning_content", "tool_calls")
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details")
DETAIL_KEYS = ("cached_tokens",)
CALL_KEYS = ("function",)
FUNCTION_KEYS = ("name", "arguments")
OBJECTS = ("chat.completion", "chat.completion.chunk", "text_completion")
# The keys semantics §1 check 4 reads: an error body has ``object == "error"`` or a non-null ``error``.
ERROR_BODY_KEYS = ("object", "error")
# Content error texts (semantics §4), a property's or key's name appended to those ending in a colon.
CONTENT_ERRORS = (
    "not_an_object",
    "missing:",
    "additional:",
    "type:",
    "enum:",
    "minimum:",
    "maximum:",
    "items:",
    "invalid_json",
)
E_NOT_OBJECT = 0
E_MISSING = 1
E_ADDITIONAL = 2
E_TYPE = 3
E_ENUM = 4
E_MINIMUM = 5
E_MAXIMUM = 6
E_ITEMS = 7
E_INVALID_JSON = 8


def pack(names: tuple[str, ...]) -> tuple[Any, Any]:
    """Names as one uint8 array plus their ends (what :func:`key_index` reads)."""
    raw = [n.encode() for n in names]
    return np.frombuffer(b"".join(raw), dtype=np.uint8).copy(), np.cumsum([len(r) for r in raw]).astype(np.int64)


TOP_NAMES, TOP_ENDS = pack(TOP_KEYS)
CHOICE_NAMES, CHOICE_ENDS = pack(CHOICE_KEYS)
MESSAGE_NAMES, MESSAGE_ENDS = pack(MESSAGE_KEYS)
USAGE_NAMES, USAGE_ENDS = pack(USAGE_KEYS)
DETAIL_NAMES, DETAIL_ENDS = pack(DETAIL_KEYS)
CALL_NAMES, CALL_ENDS = pack(CALL_KEYS)
FUNCTION_NAMES, FUNCTION_ENDS = pack(FUNCTION_KEYS)
OBJECT_NAMES, OBJECT_ENDS = pack(OBJECTS)
ERROR_BODY_NAMES, ERROR_BODY_ENDS = pack(ERROR_BODY_KEYS)
ERROR_TEXTS, ERROR_TEXT_ENDS = pack(CONTENT_ERRORS)

# Content property table columns (int64 ``ptab[j, col]``) and flags.
P_KIND = 0  # 0 string, 1 number, 2 integer, 3 boolean
P_ARRAY = 1
P_FLAGS = 2
P_MIN_I = 3
P_MAX_I = 4
P_ENUM_FIRST = 5
P_ENUM_LAST = 6
P_REQUIRED = 7  # the property's position in ``required`` (the order its ``missing`` errors follow), else -1
PTAB_COLS = 8
F_MIN = 1
F_MAX = 2
F_MIN_INT = 4
F_MAX_INT = 8
F_SLOW = 16
F_ENUM = 32


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


REASONING_CONTENT = NSLOTS  # a temporary slot triple after the persistent ones
NSLOTS_ALL = NSLOTS + 3
# Temporary choice slots: positions of message, delta and text values (-1: absent).
MESSAGE_AT = NSLOTS_ALL
DELTA_AT = NSLOTS_ALL + 1
TEXT_AT = NSLOTS_ALL + 2
SLOT_COUNT = NSLOTS_ALL + 3


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


@jit
def content_scalar(sc, p, e, j, ptab, pmin, pmax, enames, eends, r, cs, ce, cv, cd):
    """One scalar of content property ``j`` at ``p`` (an array item too): ``(end, error code or 0)``.

    ``(-1, 0)`` when not taken (the native core decides): JSON outside the lane's subset, escapes in
    a string property's value, a double for an integer property, a comparison the lane cannot make
    exactly. A failed check gives the value's end and the code of semantics §4.
    """
    kind = ptab[j, P_KIND]
    c = sc[p]
    if kind == 0:
        if c != QUOTE:
            return wrong_type(sc, p, e)
        end, _ = scan_string(sc, p, e, False)
        if end < 0:
            return -1, 0
        if (ptab[j, P_FLAGS] & F_ENUM) and not in_enum(sc, p + 1, end - 1, j, ptab, enames, eends):
            return end, E_ENUM
        cs[r, j] = p + 1
        ce[r, j] = end - 1
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
    """Whether ``sc[s:e]`` is one of property ``j``'s string enum values."""
    first = ptab[j, P_ENUM_FIRST]
    start = eends[first - 1] if first > 0 else 0
    for i in range(first, ptab[j, P_ENUM_LAST]):
        end = eends[i]
        if end - start == e - s:
            same = True
            for k in range(e - s):
                if enames[start + k] != sc[s + k]:
                    same = False
                    break
            if same:
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
        end, _ = scan_string(sc, q, e, False)
        if end < 0:
            return -1
        j = key_index(sc, q + 1, end - 1, pnames, pends, nprops)
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
            q = skip_value(sc, q, e, True)
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
    verdict = json_verdict(sc, p, q)
    if verdict == V_INVALID_JSON:
        slots[r, ERROR_CODE] = E_INVALID_JSON
        return 2
    if verdict == V_NOT_OBJECT:
        slots[r, ERROR_CODE] = E_NOT_OBJECT
        return 2
    return -1


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
    if escaped:
        k = s
        end = q + length
        while q < end:
            c = src[k]
            if c == BSLASH:
                c = unescape(src[k + 1])
                k += 2
            else:
                k += 1
            out[q] = c
            q += 1
        return q
    for k in range(length):
        out[q + k] = src[s + k]
    return q + length


@jit
def put_opt_text(src, slots, r, slot, escaped, out, q, write):
    """A ``["null", "string"]`` union from a string slot of ``src``, escapes decoded when ``escaped``."""
    s = slots[r, slot]
    if s < 0:
        return put_byte(out, q, 0, write)
    return put_text(src, s, slots[r, slot + 2], escaped, out, put_byte(out, q, 2, write), write)


@jit
def put_opt_string(b, slots, r, slot, out, q, write):
    """A ``["null", "string"]`` union from a string slot of the body, as sent."""
    return put_opt_text(b, slots, r, slot, True, out, q, write)


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
        end, length = scan_string(sc, p, e, False)
        return put_text(sc, p + 1, length, False, out, q, write), end
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
def put_content(sc, ptab, nprops, r, cs, ce, cv, cd, out, q, write):
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
            q = put_text(sc, s, ce[r, j] - s, False, out, q, write)
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
        name = slots[r, ERROR_END] - at
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
        for k in range(name):
            out[q + k] = b[at + k]
    else:
        for k in range(name):
            out[q + k] = pnames[at + k]
    return q + name


@jit
def emit(b, kb, hb, slots, r, ptab, pnames, pends, nprops, cs, ce, cv, cd, part, off, ts, out, q, write):
    """The row's Avro datum, field by field in ``TypedRecord.avro`` order; the end position."""
    q = put_opt_text(kb, slots, r, KEY, False, out, q, write)  # the key, checked UTF-8 in pass 1
    q = put_opt_string(b, slots, r, ID, out, q, write)
    q = put_opt_string(b, slots, r, OBJECT, out, q, write)
    q = put_opt_long(out, q, slots[r, CREATED], write)
    for slot in (MODEL, FINISH, STOP):
        q = put_opt_string(b, slots, r, slot, out, q, write)
    q = put_opt_text(b, slots, r, CONTENT, False, out, q, write)  # decoded in place in pass 1
    for slot in (REASONING, TOOL_NAME):
        q = put_opt_string(b, slots, r, slot, out, q, write)
    q = put_opt_text(b, slots, r, TOOL_ARGS, False, out, q, write)
    valid = slots[r, TOOL_VALID]
    q = put_byte(out, q, 0, write) if valid < 0 else put_byte(out, put_byte(out, q, 2, write), valid, write)
    n = slots[r, NUM_CHOICES]
    q = put_opt_long(out, q, n, write)
    q = put_byte(out, q, 2, write)
    if n > 0:
        q = put_long(out, q, 1, write)
        q = put_byte(out, q, 2, write)
        q = put_opt_long(out, q, slots[r, INDEX], write)
        q = put_opt_string(b, slots, r, FINISH, out, q, write)
        q = put_opt_text(b, slots, r, CONTENT, False, out, q, write)  # decoded in place in pass 1
    q = put_byte(out, q, 0, write)
    for slot in (PROMPT, COMPLETION, TOTAL, CACHED):
        q = put_opt_long(out, q, slots[r, slot], write)
    q = put_opt_long(out, q, slots[r, LATENCY], write)
    q = put_attributes(hb, slots, r, out, q, write)
    q = put_opt_string(b, slots, r, FINGERPRINT, out, q, write)
    q = put_opt_string(b, slots, r, TIER, out, q, write)
    q = put_byte(out, q, 0, write)  # metadata: null (an object is left to the native core)
    q = put_byte(out, put_byte(out, q, 2, write), 0, write)  # extra: an empty map
    state = slots[r, CONTENT_STATE]
    if state == 1:
        q = put_content(b, ptab, nprops, r, cs, ce, cv, cd, out, q, write)
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


@jit
def measure_row(
    b,
    vends,
    kb,
    kends,
    knull,
    hb,
    hends,
    max_bytes,
    slots,
    r,
    ptab,
    pnames,
    pends,
    nprops,
    required,
    closed_schema,
    pmin,
    pmax,
    enames,
    eends,
    cs,
    ce,
    cv,
    cd,
    parts,
    offs,
    tss,
):
    """Pass 1 for row ``r``: its encoded size, ``NOT_TAKEN``, or a dead letter's code (``UPSTREAM_ERROR`` and below)."""
    s = vends[r - 1] if r > 0 else 0
    e = vends[r]
    if e - s > max_bytes:
        return NOT_TAKEN
    if not body(b, s, e, slots, r, b):
        # Tool arguments are decoded in place as they are read: a body walked that far is not read again.
        if slots[r, TOOL_ARGS] >= 0:
            return NOT_TAKEN
        if error_body(b, s, e):
            return UPSTREAM_ERROR
        verdict = body_verdict(b, s, e)
        return NOT_TAKEN if verdict == V_UNKNOWN else UPSTREAM_ERROR - verdict
    if not record_columns(kb, kends, knull, hb, hends, slots, r):
        return -1
    c = slots[r, CONTENT]
    if c >= 0:
        length = slots[r, CONTENT + 2]
        copy_string(b, c, slots[r, CONTENT + 1], b, c)
        state = content_state(
            b,
            c,
            c + length,
            ptab,
            pnames,
            pends,
            nprops,
            required,
            closed_schema,
            pmin,
            pmax,
            enames,
            eends,
            slots,
            r,
            cs,
            ce,
            cv,
            cd,
        )
        if state < 0:
            return NOT_TAKEN
        slots[r, CONTENT_STATE] = state
    return emit(
        b,
        kb,
        hb,
        slots,
        r,
        ptab,
        pnames,
        pends,
        nprops,
        cs,
        ce,
        cv,
        cd,
        parts[r],
        offs[r],
        tss[r],
        b,  # the size pass writes nothing
        0,
        False,
    )


@kernel
def measure(
    b,
    vends,
    kb,
    kends,
    knull,
    hb,
    hends,
    max_bytes,
    slots,
    ptab,
    pnames,
    pends,
    nprops,
    required,
    closed_schema,
    pmin,
    pmax,
    enames,
    eends,
    cs,
    ce,
    cv,
    cd,
    parts,
    offs,
    tss,
    sizes,
):
    """Pass 1 over every row (one thread per row on the device, a loop on the CPU)."""
    r = lane_start()
    step = lane_step()
    while r < sizes.shape[0]:
        sizes[r] = measure_row(
            b,
            vends,
            kb,
            kends,
            knull,
            hb,
            hends,
            max_bytes,
            slots,
            r,
            ptab,
            pnames,
            pends,
            nprops,
            required,
            closed_schema,
            pmin,
            pmax,
            enames,
            eends,
            cs,
            ce,
            cv,
            cd,
            parts,
            offs,
            tss,
        )
        r += step


@kernel
def write(b, kb, hb, slots, ptab, pnames, pends, nprops, cs, ce, cv, cd, parts, offs, tss, starts, lo, hi, out):
    """Pass 2: each taken row whose datum starts in ``[lo, hi)`` written at ``starts[r] - lo``.

    ``starts[r]`` is -1 where the row is not taken (nothing written). The bounds let the output be
    written in pieces, through a device buffer the size of a piece.
    """
    r = lane_start()
    step = lane_step()
    while r < starts.shape[0]:
        q = starts[r]
        if q >= lo and q < hi:
            emit(
                b,
                kb,
                hb,
                slots,
                r,
                ptab,
                pnames,
                pends,
                nprops,
                cs,
                ce,
                cv,
                cd,
                parts[r],
                offs[r],
                tss[r],
                out,
                q - lo,
                True,
            )
        r += step
