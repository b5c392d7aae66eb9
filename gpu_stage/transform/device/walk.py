"""The device lane's walk of one vLLM body: envelope, choices, message, tool calls, usage.

:func:`body` walks a body once, checks everything ``gpu_stage/transform/contract/semantics.md``
asks of a good row and records where each value lies (:mod:`gpu_stage.transform.device.slots`). It
crosses each string of the body in one step, from the marks :func:`gpu_stage.transform.device.strings.mark_strings`
left in ``t``, and finds each string's decoded text at its own place in ``sc``, where the first tool
call's arguments are rewritten as compact JSON. It takes the common shape only: at most one choice, no ``metadata``
object, no unknown top-level key with a non-null value, integer ``created``, tool arguments whose
object :func:`compact_json` can spell (or that are no object at all). Anything else is left to the native core.

Same source for CUDA and the CPU (see :mod:`gpu_stage.transform.device.scan`).
"""

# mypy: disable-error-code="no-untyped-def"
# ruff: noqa: C901, PLR0915, SIM109
from __future__ import annotations

from typing import Any

if "skip_ws" not in globals():  # a plain import; compile_lane runs the sources in order, jitted
    from gpu_stage.transform.device.record import (
        NULL_INT,
    )
    from gpu_stage.transform.device.scan import (
        BSLASH,
        COLON,
        COMMA,
        LBRACE,
        LBRACK,
        MAX_DEPTH,
        QUOTE,
        RBRACE,
        RBRACK,
        copy_string,
        escape_code,
        is_null,
        literal,
        member,
        next_member,
        open_object,
        put_code,
        same_decoded,
        scan_number,
        scan_string,
        skip_value,
        skip_ws,
        string_at,
        string_index,
        trim_end,
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
    from gpu_stage.transform.device.strict import (
        V_INVALID_JSON,
        json_verdict,
    )


def _plain(fn: Any) -> Any:
    return fn


W_VALUE = 0
"""What :func:`compact_json` may meet next: a value (after ``:`` or an array's ``,``; first)."""
W_VALUE_OR_CLOSE = 1
"""A value or ``]`` (after ``[``)."""
W_KEY = 2
"""A key (after an object's ``,``)."""
W_KEY_OR_CLOSE = 3
"""A key or ``}`` (after ``{``)."""
W_COLON = 4
"""``:`` (after a key)."""
W_NEXT = 5
"""``,`` or the container's close (after a value)."""
W_END = 6
"""Nothing but whitespace (after the outermost value)."""


jit: Any = globals().get("jit", _plain)

@jit
def read_string(b, t, p, e, slots, r, slot):
    """A string-or-null value at ``p`` into a string slot; the end of the value, or -1."""
    if b[p] == QUOTE:
        end, decoded = string_at(b, t, p, e, True)
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
def on_usage(b, t, p, e, index, slots, r, sc):
    """A member of ``usage``: the three token counts and the details object."""
    if index < 3:
        return read_int(b, p, e, slots, r, PROMPT + index, NULL_INT + 1, -(NULL_INT + 1))
    if is_null(b, p, e):
        return p + 4
    p, closed = open_object(b, p, e)
    seen = 0
    while closed == 0:
        index, p, seen = member(b, t, p, e, DETAIL_NAMES, DETAIL_ENDS, 1, seen, False)
        if index >= 0:
            p = read_int(b, p, e, slots, r, CACHED, NULL_INT + 1, -(NULL_INT + 1))
        p, closed = next_member(b, p, e)
    return p


@jit
def short_escape(code):
    r"""The letter of the two-byte escape orjson writes for control character ``code`` (``\\n``...), else 0."""
    if code == 8:
        return 98
    if code == 12:
        return 102
    if code == 10:
        return 110
    if code == 13:
        return 114
    if code == 9:
        return 116
    return 0


@jit
def put_escaped(sc, w, code):
    r"""Code point ``code`` inside a string as orjson spells it (``"``, ``\\``, controls escaped); new ``w``."""
    if code == QUOTE or code == BSLASH:
        sc[w] = BSLASH
        sc[w + 1] = code
        return w + 2
    if code >= 0x20:
        return put_code(sc, w, code)
    letter = short_escape(code)
    sc[w] = BSLASH
    if letter != 0:
        sc[w + 1] = letter
        return w + 2
    low = code & 15
    sc[w + 1] = 117
    sc[w + 2] = 48
    sc[w + 3] = 48
    sc[w + 4] = 48 + (code >> 4)
    sc[w + 5] = 48 + low if low < 10 else 87 + low
    return w + 6


@jit
def respell_string(sc, p, e, w):
    """Rewrite the string at ``p`` to ``sc[w:]`` (``w <= p``) in orjson's spelling: ``(end, new w)``, end -1 if invalid.

    No spelling orjson writes is longer than any JSON spelling of the same code point, so the
    write position never passes the read position.
    """
    sc[w] = QUOTE
    w += 1
    p += 1
    while p < e:
        c = sc[p]
        if c == QUOTE:
            sc[w] = QUOTE
            return p + 1, w + 1
        if c == BSLASH:
            p, code = escape_code(sc, p, e)
            if p < 0:
                return -1, w
            w = put_escaped(sc, w, code)
        elif c < 0x20:
            return -1, w
        else:
            sc[w] = c
            w += 1
            p += 1
    return -1, w


@jit
def canonical_float(sc, p, e):
    """Length of the float ``sc[p:e]`` as orjson writes its value (trailing fraction zeros dropped), or -1.

    Taken: plain decimals (no exponent) of at most 15 significant digits, zero or at least 1e-4 and
    below 1e16; such a text is already the shortest one that reads back to its double, so only its
    trailing zeros differ from orjson's positional spelling.
    """
    q = p + 1 if sc[p] == 45 else p
    dot = q
    while dot < e and sc[dot] != 46:
        dot += 1
    if dot >= e or dot - q > 16:
        return -1
    last = e - 1
    while last > dot + 1 and sc[last] == 48:
        last -= 1
    for k in range(dot + 1, last + 1):
        if not 48 <= sc[k] <= 57:
            return -1
    first_digit = -1  # the first and last nonzero digits bound the significant ones
    last_digit = -1
    for k in range(q, last + 1):
        if k != dot and sc[k] != 48:
            if first_digit < 0:
                first_digit = k
            last_digit = k
    if first_digit >= 0:
        sig = last_digit - first_digit + (0 if first_digit < dot < last_digit else 1)
        if sig > 15 or (sc[q] == 48 and first_digit - dot > 4):
            return -1
    return last + 1 - p


@jit
def open_at(depth, o1, o2, o3):
    """Output position of the ``{`` of the ``depth``-th open object (1 to 3); also its key bits (:func:`key_bit`)."""
    if depth == 1:
        return o1
    return o2 if depth == 2 else o3


@jit
def key_bit(sc, s, e):
    """One bit of 64 for the key ``sc[s:e]``, from a hash of its bytes: equal keys, the same bit.

    An object's keys' bits ORed together tell a new key from a possible repeat without reading the
    object again; only a key whose bit is already set is looked for among the keys before it.
    """
    h = 0
    for k in range(s, e):
        h = (h * 31 + int(sc[k])) & 0xFFFFFF
    return 1 << (h & 63)


@jit
def repeated_compact_key(sc, o, w, key, key_end):
    """Whether the key ``sc[key:key_end]`` (quotes included) is already a key of the compact object at ``sc[o:w]``.

    Keys are in orjson's spelling, one per string, so equal bytes are equal strings.
    """
    q = o + 1
    while q < w:
        end, _ = scan_string(sc, q, w, True)
        if end - q == key_end - key:
            same = True
            for k in range(end - q):
                if sc[q + k] != sc[key + k]:
                    same = False
                    break
            if same:
                return True
        q = skip_value(sc, sc[:0], end + 1, w, True)
        if q < w and sc[q] == COMMA:
            q += 1
    return False


@jit
def compact_json(sc, p, e):
    """Rewrite the object ``sc[p:e]`` in place as orjson's compact JSON text, if it is strict JSON; its length, or -1.

    One pass checks the text and rewrites it: each byte is read once, and where the text is not
    strict JSON or lies outside what is taken here the pass stops (-1) with the text part rewritten.
    Taken: objects nested at most three deep (each checked for a repeated key: the last value would
    win there), integers, floats :func:`canonical_float` takes; strings, keys too, get orjson's
    spelling (the text is UTF-8: a decoded string). ``want`` is what may come next
    (:data:`W_VALUE` and after).
    """
    start = p
    w = p
    depth = 0
    stack = 0
    objects = 0
    o1 = o2 = o3 = -1
    k1 = k2 = k3 = 0  # the key bits of each open object
    want = W_VALUE
    while p < e:
        c = sc[p]
        if c == 32 or c == 9 or c == 10 or c == 13:
            p += 1
            continue
        if want == W_END:
            return -1
        if c == QUOTE:
            if want > W_KEY_OR_CLOSE:
                return -1
            key = w
            p, w = respell_string(sc, p, e, w)
            if p < 0:
                return -1
            if want >= W_KEY:
                bit = key_bit(sc, key, w)
                if open_at(objects, k1, k2, k3) & bit and repeated_compact_key(
                    sc, open_at(objects, o1, o2, o3), key, key, w
                ):
                    return -1
                if objects == 1:
                    k1 |= bit
                elif objects == 2:
                    k2 |= bit
                else:
                    k3 |= bit
            want = W_COLON if want >= W_KEY else W_NEXT
            continue
        if c == LBRACE or c == LBRACK:
            if want > W_VALUE_OR_CLOSE or depth >= MAX_DEPTH:
                return -1
            depth += 1
            stack = (stack << 1) | (1 if c == LBRACE else 0)
            want = W_VALUE_OR_CLOSE
            if c == LBRACE:
                want = W_KEY_OR_CLOSE
                objects += 1
                if objects > 3:
                    return -1
                if objects == 1:
                    o1 = w
                    k1 = 0
                elif objects == 2:
                    o2 = w
                    k2 = 0
                else:
                    o3 = w
                    k3 = 0
        elif c == RBRACE or c == RBRACK:
            in_object = c == RBRACE
            if depth == 0 or in_object != ((stack & 1) == 1):
                return -1
            if want != W_NEXT and want != (W_KEY_OR_CLOSE if in_object else W_VALUE_OR_CLOSE):
                return -1
            if in_object:
                objects -= 1
            depth -= 1
            stack >>= 1
            want = W_NEXT if depth > 0 else W_END
        elif c == COMMA:
            if want != W_NEXT:
                return -1
            want = W_KEY if stack & 1 else W_VALUE
        elif c == COLON:
            if want != W_COLON:
                return -1
            want = W_VALUE
        elif want > W_VALUE_OR_CLOSE:
            return -1
        elif c == 45 or 48 <= c <= 57:
            end, kind, value, _ = scan_number(sc, p, e)
            if kind == 1:
                length = 1 if value == 0 else end - p
                if value == 0:
                    sc[w] = 48  # -0 reads back as the integer 0
                else:
                    for k in range(length):
                        sc[w + k] = sc[p + k]
            else:
                length = canonical_float(sc, p, end) if end > 0 else -1
                if length < 0:
                    return -1
                for k in range(length):
                    sc[w + k] = sc[p + k]
            w += length
            p = end
            want = W_NEXT
            continue
        else:
            end, _ = literal(sc, p, e)
            if end < 0:
                return -1
            for k in range(p, end):
                sc[w] = sc[k]
                w += 1
            p = end
            want = W_NEXT
            continue
        sc[w] = c
        w += 1
        p += 1
    return w - start if want == W_END else -1


@jit
def as_sent(slots, r, end):
    """The tool arguments kept as the string came (semantics §4: no JSON object): not valid; ``end`` back."""
    slots[r, TOOL_VALID] = 0
    slots[r, TOOL_MODE] = 0
    return end


@jit
def tool_arguments(b, t, p, e, slots, r, sc):
    """``function.arguments``: compact JSON text of an object, or the string as sent; end, or -1.

    The string's decoded text lies in ``sc``; a text that starts as an object but is not JSON is kept as sent
    (valid false), as semantics §4 says of any string that does not parse to an object.
    """
    if is_null(b, p, e):
        slots[r, TOOL_ARGS] = -1
        slots[r, TOOL_VALID] = -1
        return p + 4
    end = read_string(b, t, p, e, slots, r, TOOL_ARGS)
    if end < 0:
        return -1
    s = slots[r, TOOL_ARGS]
    decoded_end = s + slots[r, TOOL_ARGS + 2]  # decoded into sc by the string marks
    first = skip_ws(sc, s, decoded_end)
    if first >= decoded_end or sc[first] != LBRACE:
        return as_sent(slots, r, end)
    length = compact_json(sc, first, trim_end(sc, first, decoded_end))
    if length < 0:  # not strict JSON, or outside the subset: the text is decoded again and judged
        copy_string(b, p + 1, end - 1, sc, s)
        return as_sent(slots, r, end) if json_verdict(sc, sc[:0], first, decoded_end) == V_INVALID_JSON else -1
    slots[r, TOOL_ARGS] = first
    slots[r, TOOL_ARGS + 1] = first + length
    slots[r, TOOL_ARGS + 2] = length
    slots[r, TOOL_VALID] = 1
    slots[r, TOOL_MODE] = 1
    return end


@jit
def on_call(b, t, p, e, slots, r, sc):
    """The first tool call's ``function`` (null or absent: no tool columns)."""
    if is_null(b, p, e):
        return p + 4
    p, closed = open_object(b, p, e)
    seen = 0
    while closed == 0:
        index, p, seen = member(b, t, p, e, FUNCTION_NAMES, FUNCTION_ENDS, 2, seen, False)
        if index == 0:
            p = read_string(b, t, p, e, slots, r, TOOL_NAME)
        elif index == 1:
            p = tool_arguments(b, t, p, e, slots, r, sc)
        p, closed = next_member(b, p, e)
    return p


@jit
def tool_calls(b, t, p, e, slots, r, sc):
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
        index, q, seen = member(b, t, q, e, CALL_NAMES, CALL_ENDS, 1, seen, False)
        if index >= 0:
            q = on_call(b, t, q, e, slots, r, sc)
        q, closed = next_member(b, q, e)
    if q < 0:
        return -1
    q = skip_ws(b, q, e)
    if q < e and b[q] == RBRACK:
        return q + 1
    # The other calls are not columns, but must be valid JSON: each is skipped whole.
    while q < e and b[q] == COMMA:
        q = skip_value(b, t, q + 1, e, True)
        if q < 0:
            return -1
        q = skip_ws(b, q, e)
        if q < e and b[q] == RBRACK:
            return q + 1
    return -1


@jit
def message(b, t, p, e, slots, r, sc):
    """The first choice's message (or delta) object: content, reasoning, tool calls; its end, or -1."""
    slots[r, REASONING_CONTENT] = -1
    p, closed = open_object(b, p, e)
    seen = 0
    while closed == 0:
        index, p, seen = member(b, t, p, e, MESSAGE_NAMES, MESSAGE_ENDS, 4, seen, False)
        if index == 0:
            p = read_string(b, t, p, e, slots, r, CONTENT)
        elif index == 1:
            p = read_string(b, t, p, e, slots, r, REASONING)
        elif index == 2:
            p = read_string(b, t, p, e, slots, r, REASONING_CONTENT)
        elif index == 3:
            p = tool_calls(b, t, p, e, slots, r, sc)
        p, closed = next_member(b, p, e)
    return p


@jit
def on_choice(b, t, p, e, index, slots, r, sc):
    """A member of the first choice; message, delta and text are only located here (see :func:`choice`)."""
    if index == 0:
        return read_int(b, p, e, slots, r, INDEX, -2147483648, 2147483647)
    if index == 1:
        return read_string(b, t, p, e, slots, r, FINISH)
    if index == 5:
        if b[p] == QUOTE:
            return read_string(b, t, p, e, slots, r, STOP)
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
    return skip_value(b, t, p, e, True)


@jit
def forget_text(slots, r):
    """The content column null again: a text read as it came gives way to a message or delta after it."""
    for k in range(3):
        slots[r, CONTENT + k] = -1


@jit
def choice(b, t, p, e, slots, r, sc):
    """The first choice: its columns, then the content from message, else delta, else text.

    A message is read where it stands: nothing after it can take its place, and its content (most
    of a body, often) is then walked once, not skipped first and read after. So is a text that
    comes before any message or delta (a completion's); should one come after it, the text's
    content is forgotten. A delta is only located, and read once the choice is walked, when no
    message came.
    """
    slots[r, MESSAGE_AT] = -1
    slots[r, DELTA_AT] = -1
    slots[r, TEXT_AT] = -1
    text_read = False
    end, closed = open_object(b, p, e)
    seen = 0
    while closed == 0:
        index, end, seen = member(b, t, end, e, CHOICE_NAMES, CHOICE_ENDS, 6, seen, False)
        if index == 2:
            if text_read:
                forget_text(slots, r)
                text_read = False
            slots[r, MESSAGE_AT] = end
            end = end + 4 if is_null(b, end, e) else message(b, t, end, e, slots, r, sc)
        elif index == 4 and slots[r, MESSAGE_AT] < 0 and slots[r, DELTA_AT] < 0:
            slots[r, TEXT_AT] = end
            q = read_string(b, t, end, e, slots, r, CONTENT)
            text_read = q >= 0
            end = q if text_read else skip_value(b, t, end, e, True)  # not a string: read (and refused) below
        elif index >= 0:
            end = on_choice(b, t, end, e, index, slots, r, sc)
        end, closed = next_member(b, end, e)
    if end < 0:
        return -1
    holder = slots[r, MESSAGE_AT]
    if holder < 0:
        holder = slots[r, DELTA_AT]
        if holder >= 0 and text_read:
            forget_text(slots, r)
            text_read = False
        if holder >= 0 and not is_null(b, holder, e) and message(b, t, holder, e, slots, r, sc) < 0:
            return -1
    if holder >= 0:
        if is_null(b, holder, e):
            return end
        if slots[r, REASONING] < 0:
            for k in range(3):
                slots[r, REASONING + k] = slots[r, REASONING_CONTENT + k]
        return end
    text = slots[r, TEXT_AT]
    if text >= 0 and not text_read and read_string(b, t, text, e, slots, r, CONTENT) < 0:
        return -1
    return end


@jit
def choices(b, t, p, e, slots, r, sc):
    """``choices``: an array of at most one choice (more are left to the native core)."""
    if b[p] != LBRACK:
        return -1
    q = skip_ws(b, p + 1, e)
    if q < e and b[q] == RBRACK:
        slots[r, NUM_CHOICES] = 0
        return q + 1
    q = choice(b, t, q, e, slots, r, sc)
    if q < 0:
        return -1
    q = skip_ws(b, q, e)
    if q >= e or b[q] != RBRACK:
        return -1
    slots[r, NUM_CHOICES] = 1
    return q + 1


@jit
def on_top(b, t, p, e, index, slots, r, sc):
    """A member of the top-level object (index in :data:`TOP_KEYS`)."""
    if index == 0 or index == 1:
        if b[p] != QUOTE:
            return -1
        return read_string(b, t, p, e, slots, r, ID if index == 0 else OBJECT)
    if index == 2:
        end, kind, value, _ = scan_number(b, p, e)
        if kind != 1 or value < 0 or value > 9223372036854775:
            return -1
        slots[r, CREATED] = value * 1000
        return end
    if index == 3:
        return read_string(b, t, p, e, slots, r, MODEL)
    if index == 4:
        return choices(b, t, p, e, slots, r, sc)
    if index == 5:
        if is_null(b, p, e):
            return p + 4
        p, closed = open_object(b, p, e)
        seen = 0
        while closed == 0:
            index, p, seen = member(b, t, p, e, USAGE_NAMES, USAGE_ENDS, 4, seen, False)
            if index >= 0:
                p = on_usage(b, t, p, e, index, slots, r, sc)
            p, closed = next_member(b, p, e)
        return p
    if index == 6:
        return read_string(b, t, p, e, slots, r, FINGERPRINT)
    if index == 7:
        return read_string(b, t, p, e, slots, r, TIER)
    if index == 8:
        return p + 4 if is_null(b, p, e) else -1
    return skip_value(b, t, p, e, True)


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
def body(b, t, s, e, slots, r, sc):
    """Walk one body ``b[s:e]``; True when it is a good row the lane takes."""
    clear_row(slots, r)
    p, closed = open_object(b, skip_ws(b, s, e), e)
    seen = 0
    while closed == 0:
        index, p, seen = member(b, t, p, e, TOP_NAMES, TOP_ENDS, 11, seen, True)
        if index >= 0:
            p = on_top(b, t, p, e, index, slots, r, sc)
        p, closed = next_member(b, p, e)
    if p < 0 or skip_ws(b, p, e) != e:
        return False
    if slots[r, ID] < 0 or slots[r, CREATED] < 0 or slots[r, NUM_CHOICES] < 0:
        return False
    o = slots[r, OBJECT]
    return o >= 0 and object_kind(b, o, slots[r, OBJECT + 1]) >= 0


@jit
def object_kind(b, s, e):
    """Index of the string body ``b[s:e]``, decoded, among the supported ``object`` values, else -1."""
    start = 0
    for i in range(3):
        if same_decoded(b, s, e, OBJECT_NAMES, start, OBJECT_ENDS[i]):
            return i
        start = OBJECT_ENDS[i]
    return -1


@jit
def wrong_type(sc, p, e):
    """A value of the wrong type at ``p``: ``(its end, E_TYPE)`` once it is checked as JSON, else ``(-1, 0)``."""
    end = skip_value(sc, sc[:0], p, e, True)
    return (end, E_TYPE) if end >= 0 else (-1, 0)


@jit
def error_body(b, t, s, e):
    """Whether ``b[s:e]`` is an object of strict JSON that semantics §1 check 4 calls an error body.

    ``object`` is ``"error"`` or ``error`` is present and not null. Such a body is an upstream error
    whatever its other members hold (checks 5 to 8 come after), so every value is only checked as
    JSON here. False also when the lane cannot tell: JSON outside its subset, a repeated key.
    """
    p, closed = open_object(b, skip_ws(b, s, e), e)
    seen = 0
    error = False
    while closed == 0:
        index, p, seen = member(b, t, p, e, ERROR_BODY_NAMES, ERROR_BODY_ENDS, 2, seen, False)
        if index == 0:
            error = error or is_error_string(b, t, p, e)
        elif index == 1:
            error = error or not is_null(b, p, e)
        if index >= 0:
            p = skip_value(b, t, p, e, True)
        p, closed = next_member(b, p, e)
    return p >= 0 and skip_ws(b, p, e) == e and error


@jit
def is_error_string(b, t, p, e):
    """Whether the value at ``p`` is the string ``"error"``, however escaped."""
    if b[p] != QUOTE:
        return False
    end, length = string_at(b, t, p, e, True)
    return end >= 0 and string_index(b, p, end, length, ERROR_BODY_NAMES, ERROR_BODY_ENDS, 2) == 1
