r"""A body's strings found and decoded in one pass over its bytes, so that the walk crosses each in one step.

The walk of :mod:`gpu_stage.transform.device.walk` used to read every string a byte at a time
(:func:`gpu_stage.transform.device.scan.scan_string`), branching on what each byte is; a warp's 32
bodies then take 32 paths, and on real-shaped bodies (89 % of whose bytes lie in strings) the device
issued about two threads' work per warp instruction. :func:`mark_strings` reads the body once, every
byte with the same few steps whatever it holds (the state of a string, an escape, a ``\u`` escape and
a UTF-8 sequence carried in integers), so a warp's threads run together through it. It leaves, for
each string of the body outside any other string, two entries in a position-indexed array ``t`` of
16-bit integers:

* ``t[open]`` (the opening quote): the distance to the closing quote, or 0 where the bytes must be
  scanned: a string that :func:`gpu_stage.transform.device.scan.scan_string` refuses (a control byte,
  a bad escape, a lone surrogate, UTF-8 that is not well formed, no closing quote) or one longer
  than :data:`MAX_SPAN`; ``t[open + 1]`` then tells the two apart
  (:data:`gpu_stage.transform.device.scan.REFUSED`), so that a refused string, such as a
  truncated body's last one, is known invalid without a byte of it read again;
* ``t[close]``: the string's decoded length in UTF-8 bytes. Every escape decodes to fewer bytes than
  its spelling and every other byte to itself, so a string holds an escape exactly when it is
  shorter decoded than spelled.

The same pass writes the body into ``dec`` with each string's text decoded (every escape, surrogate
pairs as one code point) where its spelling starts: what the walk reads as decoded text (the
content's JSON, the tool arguments) and what pass 2 copies, a byte for a byte.

:func:`gpu_stage.transform.device.scan.string_at` reads them back: ``scan_string``'s answer for the
string at a position, without its bytes. Only the walk's own positions are asked: it starts where
this pass starts and crosses strings by the same rules, so every quote it stands on opens a string
here too. A walk over text that is not the body's (the decoded content) passes an empty ``t`` and
scans bytes as before.

The executors run this pass a warp per body: :func:`gpu_stage.transform.device.warp.mark_strings_steps`
reads 32 bytes a step and leaves the same marks and decoded text for every string a walk crosses.
Even with the same steps for every byte, one thread per body still diverged (a warp ran as long as
its longest body); :func:`mark_strings` defines the marks, and the tests compare the warp's pass with it.

Same source for CUDA and the CPU (see :mod:`gpu_stage.transform.device.scan`).
"""

# mypy: disable-error-code="no-untyped-def"
# ruff: noqa: C901, PLR0915, SIM109
from __future__ import annotations

from typing import Any

if "skip_ws" not in globals():  # a plain import; compile_lane runs the sources in order, jitted
    from gpu_stage.transform.device.scan import (
        REFUSED,
        put_code,
        unescape,
    )


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)

MAX_SPAN = 0xFFFF
"""The longest distance from a string's opening quote to its closing one that ``t`` holds."""
S_TEXT = 0
"""In a string's text (the other states are inside an escape)."""
S_ESCAPE = 1
"""After a backslash."""
S_HEX = 2
"""Among the four hex digits of a ``\\u`` escape (``digits`` says how many are still due)."""
S_LOW_BSLASH = 3
"""After a high surrogate: its low surrogate's backslash is due."""
S_LOW_U = 4
"""After a high surrogate and a backslash: ``u`` is due."""
S_LOW_HEX = 5
"""Among the four hex digits of a low surrogate."""


@jit
def hex_value(c):
    """The value of hex digit ``c``, or -1."""
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


@jit
def utf8_lead(c):
    """A byte above 0x7F that starts a sequence: ``(continuation bytes due, lowest, highest next)``; 0 due: bad."""
    if c < 0xC2 or c > 0xF4:
        return 0, 0, 0
    if c < 0xE0:
        return 1, 0x80, 0xBF
    if c < 0xF0:
        if c == 0xE0:
            return 2, 0xA0, 0xBF
        if c == 0xED:
            return 2, 0x80, 0x9F
        return 2, 0x80, 0xBF
    if c == 0xF0:
        return 3, 0x90, 0xBF
    if c == 0xF4:
        return 3, 0x80, 0x8F
    return 3, 0x80, 0xBF


@jit
def mark_strings(b, t, dec, s, e):
    """Mark every string of the body ``b[s:e]`` in ``t`` and decode it into ``dec``; the number of strings.

    ``dec`` gets the body's bytes at their own places, each string's text decoded in place of its
    spelling: the decoded text of the string opened at ``p`` starts at ``dec[p + 1]`` (a decoded
    string is never longer than its spelling, and what follows it up to its closing quote is left
    as it comes). Outside strings a byte only opens one; inside, each byte moves the string's state
    by a few integer steps. A string found bad is read on as text up to the next quote, which closes
    it (the lexing may then differ from a byte walk's, which stops at the bad byte: no walk goes past
    a string it refuses).
    """
    in_string = False
    opened = s
    state = S_TEXT
    digits = 0
    code = 0
    first = 0  # a surrogate pair's high half
    due = 0  # UTF-8 continuation bytes still due
    least = 0x80
    most = 0xBF
    q = s
    bad = False
    strings = 0
    for p in range(s, e):
        c = int(b[p])
        if not in_string:
            dec[p] = c
            if c == 34:
                in_string = True
                opened = p
                q = p + 1
                state = S_TEXT
                due = 0
                bad = False
            continue
        if state == S_TEXT:
            if due > 0:
                if least <= c <= most:
                    due -= 1
                    least = 0x80
                    most = 0xBF
                    dec[q] = c
                    q += 1
                else:
                    bad = True
                    due = 0
            elif c == 34:
                in_string = False
                span = p - opened
                t[opened] = 0 if bad or span > MAX_SPAN else span
                if t[opened] == 0:  # a bad or long string: a byte inside holds which
                    t[opened + 1] = REFUSED if bad else 0
                t[p] = q - opened - 1
                strings += 1
            elif c == 92:
                state = S_ESCAPE
            elif c < 0x20:
                bad = True
            else:
                if c >= 0x80:
                    due, least, most = utf8_lead(c)
                    if due == 0:
                        bad = True
                dec[q] = c
                q += 1
        elif state == S_ESCAPE:
            if c == 117:
                state = S_HEX
                digits = 4
                code = 0
            else:
                state = S_TEXT
                dec[q] = unescape(c)
                q += 1
                if not (c == 34 or c == 92 or c == 47 or c == 98 or c == 102 or c == 110 or c == 114 or c == 116):
                    bad = True
        elif state == S_HEX or state == S_LOW_HEX:
            d = hex_value(c)
            if d < 0:
                bad = True
                state = S_TEXT
            else:
                code = code * 16 + d
                digits -= 1
                if digits == 0:
                    if state == S_LOW_HEX:
                        state = S_TEXT
                        if 0xDC00 <= code < 0xE000:
                            q = put_code(dec, q, 0x10000 + ((first - 0xD800) << 10) + (code - 0xDC00))
                        else:
                            bad = True
                    elif 0xD800 <= code < 0xDC00:
                        state = S_LOW_BSLASH
                        first = code
                    else:
                        state = S_TEXT
                        if 0xDC00 <= code < 0xE000:
                            bad = True
                        else:
                            q = put_code(dec, q, code)
        elif state == S_LOW_BSLASH or state == S_LOW_U:
            if c == (92 if state == S_LOW_BSLASH else 117):
                state = S_LOW_U if state == S_LOW_BSLASH else S_LOW_HEX
                digits = 4
                code = 0
            else:
                bad = True
                state = S_TEXT
    if in_string:
        t[opened] = 0
        if opened + 1 < e:
            t[opened + 1] = REFUSED
        strings += 1
    return strings
