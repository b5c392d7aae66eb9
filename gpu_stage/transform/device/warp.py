r"""Strings read 32 bytes at a step, for the lane's ``warp`` order: a warp of 32 threads walks each body.

With one thread per body, a string is read a byte per step, and a warp's 32 bodies each take
their own path through it: on real traffic the device issued about two threads' work per warp
instruction, and most of its time went to scanning strings. With ``warp``
(``TransformSettings.lane_order``) each body gets a whole warp. Its 32 threads run the one-thread
walk of :mod:`gpu_stage.transform.device.scan` to :mod:`gpu_stage.transform.device.rows`
together, each with the same values, so they never part, except in a string's run of bytes: there
:func:`scan_string_steps` and :func:`copy_string_steps` read 32 bytes at a step, thread (lane)
``k`` of the warp byte ``k``, the 32 reads in one memory transaction.

A step goes in three parts. First the step's quotes, backslashes and other bytes to look at
(control bytes, UTF-8), a bit per lane (a ballot of each lane's byte: :func:`marks_by_lanes`).
Then the escapes and the closing quote, found from those bits the same way by every lane
(:func:`string_step`); the step ends past an escape or a UTF-8 sequence that runs over its last
byte, so the next step starts at a character's first byte. Last, unless the step is plain ASCII up
to its stop (a byte each, nothing to check), what each lane's byte stands for
(:func:`lane_piece`: a byte, a whole UTF-8 sequence or escape, or nothing, being inside one),
checked by its own lane, summed over the warp and, for a copy, written at the place that the sum of
the lanes before it gives (:func:`copy_by_lanes`). The escape rules are those of
:func:`gpu_stage.transform.device.scan.escape_code`, the result that of the byte-at-a-time
:func:`gpu_stage.transform.device.scan.scan_string` and ``copy_string``.

The target-bound parts (:func:`marks_by_lanes`, :func:`widths_by_lanes`, :func:`copy_by_lanes`
and :func:`bit_index`) are written here as a loop over the 32 lanes, which is what the CPU build
runs (the tests compare it, byte for byte, with the one-thread build and the native core); the
CUDA ``warp`` build replaces them with one lane's part and the warp's ballots
(:mod:`gpu_stage.transform.device.kernels`). Same source for CUDA and the CPU (see
:mod:`gpu_stage.transform.device.scan`).
"""

# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from typing import Any

if "skip_ws" not in globals():  # a plain import; compile_lane runs the sources in order, jitted
    from gpu_stage.transform.device.scan import (
        BSLASH,
        QUOTE,
        REFUSED,
        escape_code,
        is_ws,
        put_code,
        utf8_len,
        utf8_width,
    )
    from gpu_stage.transform.device.strings import MAX_SPAN


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)

LANES = 32
"""Threads of a warp, and bytes of a string step."""
NO_STOP = LANES
""":func:`string_step`'s stop when the step holds no closing quote."""
ALL_LANES = (1 << LANES) - 1
"""A step's mask with every lane's bit set."""
EVEN_LANES = 0x55555555
"""A step's mask with the bits of lanes 0, 2, 4 … set."""


@jit
def lane_byte(b, p, e, lane):
    """Byte ``lane`` of the step at ``p``; a space (neither quote nor backslash) past the end ``e``."""
    k = p + lane
    return b[k] if k < e else 32


@jit
def lead_width(c):
    """Bytes of the UTF-8 sequence that lead byte ``c`` (>= 0xC0) starts, by its high bits alone."""
    if c < 0xE0:
        return 2
    return 3 if c < 0xF0 else 4


@jit
def escape_span(b, k, e):
    r"""Bytes after the backslash at ``k`` that its escape takes, by its spelling: 1, 5 for ``\\uXXXX``, 11 for a pair.

    A pair is a high surrogate's ``\\uD8xx``-``\\uDBxx`` followed by ``\\u``; whether the escape is
    valid is its lane's to check (:func:`lane_piece`), as :func:`escape_code` does byte at a time.
    """
    if k + 1 >= e or b[k + 1] != 117:
        return 1
    if k + 8 > e:
        return 5
    h0 = b[k + 2]
    h1 = b[k + 3]
    high = (h0 == 100 or h0 == 68) and (h1 == 56 or h1 == 57 or h1 == 97 or h1 == 98 or h1 == 65 or h1 == 66)
    return 11 if high and b[k + 6] == BSLASH and b[k + 7] == 117 else 5


@jit
def string_step(b, p, e, quotes, slashes, odd):
    """The step at ``p`` from its bits (:func:`marks_by_lanes`): ``(stop, starts, covered, next step)``.

    ``stop`` is the lane of the closing quote (:data:`NO_STOP` if none), ``starts`` the lanes of the
    escapes' backslashes before it, ``covered`` the lanes the escapes' other bytes take. The next
    step starts after this one, or after an escape or a UTF-8 sequence that runs over its end.
    Every lane works this out alike, from the same bits, in the same steps whatever the number of
    escapes: which backslashes begin one from where they stand in their run
    (:func:`escape_starts`), how far each reaches from its spelling (:func:`warp_escapes`, each
    lane its own, then a ballot), the closing quote as the first quote that none of them covers.
    """
    starts = 0
    covered = 0
    if slashes != 0:
        runs = escape_starts(slashes)
        five, pairs = warp_escapes(b, p, e, runs)
        covered = ((runs & ~(five | pairs)) << 1) | spread(five, 5) | spread(pairs, 11)
        starts = runs & ~covered  # less a pair's second backslash, or one inside a broken \u escape
    free = quotes & ~covered & ALL_LANES
    if free != 0:
        stop = first_bit(free)  # no escape before it reaches it, so none runs over the step's end
        return stop, starts & ((1 << stop) - 1), covered, p + LANES
    after = p + LANES
    over = covered >> LANES
    while over > 0:  # the escape that runs furthest over the step's end
        after += 1
        over >>= 1
    if (odd >> (LANES - 3)) == 0:
        return NO_STOP, starts, covered, after
    for lane in range(LANES - 3, LANES):  # a lead byte in the last three whose sequence runs over
        k = p + lane
        if k < e and not (covered >> lane) & 1 and b[k] >= 0xC0:
            after = max(after, k + lead_width(b[k]))
    return NO_STOP, starts, covered, after


@jit
def escape_starts(slashes):
    r"""Of a step's backslashes, those that begin an escape: the first, third, fifth … of each run.

    The others are escaped by the one before them (``\\``). A step starts at a character's
    first byte, so no run comes from the step before. Adding a run's first bit carries through
    the run, which marks the runs that start on an even lane.
    """
    firsts = slashes & ~(slashes << 1)
    in_even_runs = slashes & ~(slashes + (firsts & EVEN_LANES))
    return (in_even_runs & EVEN_LANES) | (slashes & ~in_even_runs & ~EVEN_LANES)


@jit
def spread(mask, span):
    """Every lane from one to ``span`` after a lane of ``mask`` (past the step's end too)."""
    out = 0
    for t in range(1, span + 1):
        out |= mask << t
    return out


@jit
def escapes_by_lanes(b, p, e, starts):
    """Of the escapes at ``starts``, those that take 5 bytes after their backslash and the pairs that take 11.

    Lane by lane, each by :func:`escape_span`; on the device each lane its own, then two ballots.
    """
    five = 0
    pairs = 0
    for lane in range(LANES):
        if (starts >> lane) & 1:
            span = escape_span(b, p + lane, e)
            if span == 5:
                five |= 1 << lane
            elif span == 11:
                pairs |= 1 << lane
    return five, pairs


@jit
def continues(b, p, k):
    """Whether the continuation byte at ``k`` belongs to a lead byte at most three before it, in the step at ``p``.

    Steps start at a character's first byte, so a continuation byte's lead is in its own step.
    """
    for back in range(1, 4):
        j = k - back
        if j < p:
            return False
        c = b[j]
        if c < 0x80:
            return False
        if c >= 0xC0:
            return lead_width(c) > back
    return False


@jit
def lane_piece(b, p, e, lane, stop, starts, covered, check):
    """What lane ``lane`` of the step at ``p`` stands for: ``(decoded bytes, value, escape, invalid)``.

    An escape's lane: its code point (``value``) and UTF-8 width; a lead byte's: its whole sequence,
    its bytes packed into ``value`` (read now, as a copy in place may overwrite them before it
    writes); a plain byte's: itself; a lane inside an escape or sequence, or past the stop: nothing.
    With ``check`` the lane checks its byte as :func:`scan_string` does (a control byte, an invalid
    escape or UTF-8 sequence is invalid); without, the string is known good (a copy).
    """
    k = p + lane
    if lane >= stop or k >= e or (covered >> lane) & 1:
        return 0, 0, False, False
    if (starts >> lane) & 1:
        end, code = escape_code(b, k, e)
        if end < 0:
            return 0, 0, True, True
        return utf8_width(code), code, True, False
    c = b[k]
    if c < 0x80:
        return 1, c, False, check and c < 0x20
    if c < 0xC0:
        return 0, 0, False, check and not continues(b, p, k)
    width = utf8_len(b, k, e) if check else lead_width(c)
    if width == 0:
        return 0, 0, False, True
    value = 0
    for t in range(width):
        value |= int(b[k + t]) << (8 * t)
    return width, value, False, False


@jit
def lane_put(out, q, width, value, escaped):
    """Write a lane's piece (:func:`lane_piece`) at ``out[q:]``; the new ``q``."""
    if escaped:
        return put_code(out, q, value)
    for t in range(width):
        out[q + t] = (value >> (8 * t)) & 0xFF
    return q + width


@jit
def bit_index(mask):
    """Index of the lowest set bit of ``mask`` (not 0)."""
    i = 0
    while not (mask >> i) & 1:
        i += 1
    return i


@jit
def marks_by_lanes(b, p, e):
    """The step's quotes, backslashes and bytes a lane must look at (:func:`odd_byte`), lane by lane.

    On the device each is a ballot of the lanes' bytes.
    """
    quotes = 0
    slashes = 0
    odd = 0
    for lane in range(LANES):
        c = lane_byte(b, p, e, lane)
        if c == QUOTE:
            quotes |= 1 << lane
        elif c == BSLASH:
            slashes |= 1 << lane
        elif odd_byte(c):
            odd |= 1 << lane
    return quotes, slashes, odd


@jit
def spaces_by_lanes(b, p, e):
    """The step's JSON whitespace bytes, a bit per lane; none past the end (a ballot on the device)."""
    spaces = 0
    for lane in range(LANES):
        k = p + lane
        if k < e and is_ws(b[k]):
            spaces |= 1 << lane
    return spaces


@jit
def odd_byte(c):
    """Whether byte ``c`` is a control byte (invalid in a string) or part of a UTF-8 sequence."""
    return c < 0x20 or c >= 0x80


@jit
def widths_by_lanes(b, p, e, stop, starts, covered):
    """The step's decoded bytes and whether a lane found it invalid (a sum and a ballot on the device)."""
    total = 0
    invalid = False
    for lane in range(LANES):
        width, _, _, bad = lane_piece(b, p, e, lane, stop, starts, covered, True)
        total += width
        invalid = invalid or bad
    return total, invalid


@jit
def copy_by_lanes(b, p, e, stop, starts, covered, out, q, limit):
    """The step's pieces before ``stop`` written from ``out[q:]`` in lane order, none at ``limit`` or after; new ``q``.

    On the device each lane writes its own, where the sum of the lanes' pieces before it says. The
    limit ends a copy whose source is not a string closed by a quote (pass 2 copies a number's text
    that way, ``stop_reason``'s): the decoded length says where it ends.

    In place (``out`` is ``b``, ``q <= p``) lane by lane is safe: a lane reads its own bytes, at or
    after any place written before it.
    """
    for lane in range(LANES):
        width, value, escaped, _ = lane_piece(b, p, e, lane, stop, starts, covered, False)
        if width > 0 and q < limit:
            q = lane_put(out, q, width, value, escaped)
    return q


@jit
def copy_bytes_by_lanes(src, s, out, q, n):
    """``n`` bytes from ``src[s:]`` to ``out[q:]`` (another array).

    On the device lane ``k`` copies bytes ``k``, ``k + 32`` and so on.
    """
    for k in range(n):
        out[q + k] = src[s + k]


@jit
def copy_checked_by_lanes(b, p, e, stop, starts, covered, out, q):
    """The step's pieces before ``stop`` written from ``out[q:]``, each lane's checked: ``(new q, invalid)``.

    :func:`copy_by_lanes` and :func:`widths_by_lanes` in one: the strings pass decodes every string
    and learns whether it is good in the same step (on the device a sum, a write each and a ballot).
    """
    invalid = False
    for lane in range(LANES):
        width, value, escaped, bad = lane_piece(b, p, e, lane, stop, starts, covered, True)
        if width > 0:
            q = lane_put(out, q, width, value, escaped)
        invalid = invalid or bad
    return q, invalid


@jit
def high_bit_index(mask):
    """Index of the highest set bit of ``mask`` (not 0, below bit 32)."""
    i = LANES - 1
    while not (mask >> i) & 1:
        i -= 1
    return i


@jit
def bits_set(mask):
    """How many bits of ``mask`` (below bit 32) are set."""
    n = 0
    for lane in range(LANES):
        n += (mask >> lane) & 1
    return n


@jit
def copy_lanes_by_lanes(src, p, out, lanes):
    """``out[p + k] = src[p + k]`` for each lane ``k`` of ``lanes`` (on the device each lane its own byte)."""
    for lane in range(LANES):
        if (lanes >> lane) & 1:
            out[p + lane] = src[p + lane]


@jit
def plain_marks_by_lanes(t, p, quotes, opens):
    """The marks of the plain strings opened at lanes ``opens`` of the step at ``p``, each closed by the next quote.

    A plain string (ASCII, no escape, no control byte) decodes to its own bytes: its span, and its
    span less one as its decoded length. On the device each opening quote's lane writes its string's two.
    """
    for lane in range(LANES):
        if (opens >> lane) & 1:
            span = first_bit(quotes >> (lane + 1)) + 1
            t[p + lane] = span
            t[p + lane + span] = span - 1


if "warp_marks" not in globals():  # the CUDA warp build brings its own (kernels.py)
    warp_marks = marks_by_lanes
    warp_widths = widths_by_lanes
    warp_copy = copy_by_lanes
    warp_copy_checked = copy_checked_by_lanes
    warp_copy_bytes = copy_bytes_by_lanes
    warp_spaces = spaces_by_lanes
    warp_escapes = escapes_by_lanes
    warp_copy_lanes = copy_lanes_by_lanes
    warp_plain_marks = plain_marks_by_lanes
    first_bit = bit_index
    last_bit = high_bit_index
    bit_count = bits_set


@jit
def scan_string_steps(b, p, e, allow_escapes):
    """:func:`gpu_stage.transform.device.scan.scan_string` a step of 32 bytes at a time: ``(end, decoded length)``."""
    p += 1
    n = 0
    while p < e:
        quotes, slashes, odd = warp_marks(b, p, e)
        stop, starts, covered, after = string_step(b, p, e, quotes, slashes, odd)
        if starts != 0 and not allow_escapes:
            return -1, 0
        if starts == 0 and (odd & ((1 << stop) - 1)) == 0:
            n += stop  # plain ASCII up to the stop: a byte each (past the end there is no stop)
        else:
            width, invalid = warp_widths(b, p, e, stop, starts, covered)
            if invalid:
                return -1, 0
            n += width
        if stop != NO_STOP:
            return p + stop + 1, n
        p = after
    return -1, 0


@jit
def skip_ws_steps(b, p, e):
    """:func:`gpu_stage.transform.device.scan.skip_ws` 32 bytes a step: the first byte not whitespace, or ``e``."""
    while p < e:
        spaces = warp_spaces(b, p, e)
        if spaces != ALL_LANES:  # a lane past the end counts as not whitespace, so the result is at most e
            return p + first_bit(~spaces & ALL_LANES)
        p += LANES
    return e


@jit
def copy_steps(b, s, e, out, q, limit):
    """The string body at ``b[s:]`` decoded at ``out[q:]`` a step at a time; the new ``q``.

    The copy ends at ``e`` or the closing quote in ``b``, and at ``limit`` in ``out``.
    """
    while s < e and q < limit:
        quotes, slashes, odd = warp_marks(b, s, e)
        stop, starts, covered, after = string_step(b, s, e, quotes, slashes, odd)
        q = warp_copy(b, s, e, stop, starts, covered, out, q, limit)
        s = after
    return q


@jit
def copy_string_steps(b, s, e, out, q):
    """:func:`gpu_stage.transform.device.scan.copy_string` 32 bytes a step (a string known good); the new ``q``."""
    return copy_steps(b, s, e, out, q, out.shape[0])


@jit
def decode_steps(src, s, length, out, q):
    """The ``length`` bytes the JSON string body at ``src[s:]`` decodes to, at ``out[q:]``, 32 source bytes a step.

    :func:`gpu_stage.transform.device.emit.put_decoded`'s: the text is known good, and ends at its
    closing quote or, for a number's text, at ``length`` bytes. No spelling is longer than six bytes
    a decoded byte, which bounds the reads.
    """
    return copy_steps(src, s, min(src.shape[0], s + 6 * length + 1), out, q, q + length)


@jit
def in_strings(quotes):
    """The lanes of a step from outside any string that lie in one, its opening quote included, its closing one not.

    The parity of the quotes at or below each lane (a prefix XOR in five shifts): right up to the
    first backslash in a string, after which a quote may be escaped.
    """
    inside = quotes ^ (quotes << 1)
    inside ^= inside << 2
    inside ^= inside << 4
    inside ^= inside << 8
    inside ^= inside << 16
    return inside & ALL_LANES


@jit
def mark_strings_steps(b, t, dec, s, e):
    """:func:`gpu_stage.transform.device.strings.mark_strings` 32 bytes a step: the same marks and decoded copy.

    One thread a body, the strings pass diverges as its warp's bodies differ in length and in what
    their strings hold; a warp a body, every step is the same for its 32 threads, and its reads and
    writes are each one transaction. A step starts outside any string. Every string that opens and
    closes in it with nothing but printable ASCII between its quotes (most of a body's keys and short
    values) is marked in that step, each opening quote's lane writing its string's two marks
    (:func:`in_strings` tells opening quotes from closing ones), and the step's bytes outside
    strings and inside those are copied as they are. The first string that holds anything else (an
    escape, UTF-8, a control byte) or runs past the step is then read by :func:`mark_string_steps`,
    and the next step starts after it. A string found bad ends at the first quote that no escape
    covers, where ``mark_strings`` ends it at the first quote it reads as text: the strings after
    one may be marked apart, but no walk goes past a string it refuses.
    """
    p = s
    strings = 0
    while p < e:
        quotes, slashes, odd = warp_marks(b, p, e)
        inside = in_strings(quotes)
        trouble = (slashes | odd) & inside
        if trouble != 0:  # the string that holds it opened at the last quote before it
            held = last_bit(quotes & ((1 << first_bit(trouble)) - 1))
        elif (inside >> (LANES - 1)) & 1:  # a string runs past the step
            held = last_bit(quotes)
        else:
            held = LANES
        plain = quotes & inside & ((1 << held) - 1)  # opened (and closed) before it
        copied = min(LANES, e - p) if held == LANES else held + 1
        warp_copy_lanes(b, p, dec, ((1 << copied) - 1) & ~(quotes & ~inside))  # not the closing quotes
        if plain != 0:
            warp_plain_marks(t, p, quotes, plain)
            strings += bit_count(plain)
        if held == LANES:
            p += LANES
            continue
        opened = p + held
        p, q, bad = mark_string_steps(b, opened, e, dec)
        strings += 1
        if p < 0:
            t[opened] = 0
            if opened + 1 < e:
                t[opened + 1] = REFUSED
            return strings
        span = p - 1 - opened
        t[opened] = 0 if bad or span > MAX_SPAN else span
        if t[opened] == 0:
            t[opened + 1] = REFUSED if bad else 0
        t[p - 1] = q - opened - 1
    return strings


@jit
def mark_string_steps(b, opened, e, dec):
    """The string opened at ``opened`` decoded into ``dec[opened + 1:]``: ``(end, new q, bad)``; end -1 if unclosed.

    A step of plain ASCII up to its stop is copied as it is; any other is decoded lane by lane, each
    lane checking its byte as :func:`gpu_stage.transform.device.scan.scan_string` does.
    """
    p = opened + 1
    q = p
    bad = False
    while p < e:
        quotes, slashes, odd = warp_marks(b, p, e)
        stop, starts, covered, after = string_step(b, p, e, quotes, slashes, odd)
        if starts == 0 and (odd & ((1 << stop) - 1)) == 0:
            n = min(stop, e - p)
            warp_copy_bytes(b, p, dec, q, n)
            q += n
        else:
            q, invalid = warp_copy_checked(b, p, e, stop, starts, covered, dec, q)
            bad = bad or invalid
        if stop != NO_STOP:
            return p + stop + 1, q, bad
        p = after
    return -1, q, True
