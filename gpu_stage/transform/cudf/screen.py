r"""The pre-screen as one device thread per body, so no per-body Python runs before the device read.

:func:`screen_row` walks one body byte by byte and answers 1 only when the device reader's result
is sure to match the CPU reference (``gpu_stage/transform/contract/semantics.md``): size limit, ``{`` first and ``}``
last, no byte below 0x20 (a raw newline would split the JSON-lines buffer), strict UTF-8, no ``\u``
escape and no unknown escape, no ``NaN``/``Infinity`` token, brackets that nest and close the top
object exactly at the last byte, no explicit ``null`` for a ``message``/``delta`` key, and no key
repeated within one object (orjson keeps the last of duplicate keys, the device reader the first),
every element of a ``choices`` or ``tool_calls`` array an object, an object
or null for ``message``, ``delta``, ``usage``, ``function``, ``prompt_tokens_details`` (the reader
may give a value of another type as an empty struct, where the reference rejects the body), no number
beyond what a double holds (more than :data:`MAX_DIGITS` digits or an exponent of
three digits: orjson rejects infinite values, so such a body is the reference's to judge).

Keys are compared by a hash of their *decoded* bytes plus their length (``"a\/b"`` and ``"a/b"`` are
one key); a hash collision only sends a body to the slow lane. Objects nested deeper than
:data:`MAX_DEPTH` or holding more than :data:`MAX_KEYS` open keys also go to the slow lane. The same
function runs as plain Python in the tests (CPU) and compiled by numba-cuda on the device.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

MAX_DEPTH = 62
MAX_KEYS = 256
MAX_DIGITS = 300
MAX_EXPONENT_DIGITS = 2
_P = 2147483647
_M = 131
_KEY_LEN = 4294967296


def key_id(name: bytes) -> int:
    """The id :func:`screen_row` gives a key whose decoded bytes are ``name``."""
    h = 0
    for c in name:
        h = (h * _M + c) % _P
    return h + len(name) * _KEY_LEN


_MESSAGE = key_id(b"message")
_DELTA = key_id(b"delta")
_CHOICES = key_id(b"choices")
_USAGE = key_id(b"usage")
_FUNCTION = key_id(b"function")
_DETAILS = key_id(b"prompt_tokens_details")
_TOOL_CALLS = key_id(b"tool_calls")


def screen_row(chars: Any, start: int, end: int, limit: int, keys: Any, objstart: Any) -> int:  # noqa: C901, PLR0915
    """1 when the body ``chars[start:end]`` may go to the device reader, else 0 (see the module doc).

    ``keys`` (:data:`MAX_KEYS` int64) and ``objstart`` (:data:`MAX_DEPTH` int64) are scratch space:
    the ids of the keys of every open object, and where each open object's keys begin.
    """
    n = end - start
    if n > limit or n < 2 or chars[start] != 123 or chars[end - 1] != 125:
        return 0
    depth = 0
    objects = 0  # bit d set: the container at depth d is an object
    nkeys = 0
    in_str = False
    is_key = False
    expect_key = False
    special = False
    after_colon = False
    list_key = False  # the key just read is "choices"/"tool_calls"
    struct_key = False  # the key just read is one the reader declares as an object
    struct_value = False  # waiting for the value of such a key
    list_value = False  # waiting for the value of such a key
    open_objects_only = False  # the next ``[`` starts an array that may hold objects only
    objects_only = 0  # bit d set: the array at depth d may hold objects only
    elem_start = False  # the next value is an element of such an array
    digits = 0
    in_exp = False
    exp_digits = 0
    utf8_left = 0
    lo = 128
    hi = 191
    h = 0
    klen = 0
    i = start
    while i < end:
        c = chars[i]
        if c < 32:
            return 0
        if utf8_left > 0:
            if c < lo or c > hi:
                return 0
            utf8_left -= 1
            lo = 128
            hi = 191
            if is_key:
                h = (h * _M + c) % _P
                klen += 1
            i += 1
            continue
        if c >= 128:
            if not in_str:
                return 0
            if 194 <= c <= 223:
                utf8_left = 1
            elif c == 224:
                utf8_left = 2
                lo = 160
            elif c == 237:
                utf8_left = 2
                hi = 159
            elif 225 <= c <= 239:
                utf8_left = 2
            elif c == 240:
                utf8_left = 3
                lo = 144
            elif 241 <= c <= 243:
                utf8_left = 3
            elif c == 244:
                utf8_left = 3
                hi = 143
            else:
                return 0
            if is_key:
                h = (h * _M + c) % _P
                klen += 1
            i += 1
            continue
        if in_str:
            if c == 92:
                i += 1
                if i >= end:
                    return 0
                e = chars[i]  # the byte the escape stands for; \u and unknown escapes go slow
                d = 0
                if e == 34 or e == 92 or e == 47:
                    d = e
                elif e == 98:
                    d = 8
                elif e == 102:
                    d = 12
                elif e == 110:
                    d = 10
                elif e == 114:
                    d = 13
                elif e == 116:
                    d = 9
                else:
                    return 0
                if is_key:
                    h = (h * _M + d) % _P
                    klen += 1
            elif c == 34:
                in_str = False
                if is_key:
                    kid = h + klen * _KEY_LEN
                    for k in range(objstart[depth], nkeys):
                        if keys[k] == kid:
                            return 0
                    if nkeys == MAX_KEYS:
                        return 0
                    keys[nkeys] = kid
                    nkeys += 1
                    special = (kid == _MESSAGE) | (kid == _DELTA)
                    struct_key = special | (kid == _USAGE) | (kid == _FUNCTION) | (kid == _DETAILS)
                    list_key = (kid == _CHOICES) | (kid == _TOOL_CALLS)
                    is_key = False
            elif is_key:
                h = (h * _M + c) % _P
                klen += 1
            i += 1
            continue
        if 48 <= c <= 57:  # digits: numbers a double cannot hold make orjson fail, so they go slow
            if in_exp:
                exp_digits += 1
                if exp_digits > MAX_EXPONENT_DIGITS:
                    return 0
            else:
                digits += 1
                if digits > MAX_DIGITS:
                    return 0
        elif c == 101 or c == 69:
            in_exp = True
            exp_digits = 0
        elif c != 43 and c != 45 and c != 46:
            in_exp = False
            digits = 0
        if c == 32:
            i += 1
            continue
        if after_colon:
            after_colon = False
            if c == 110:
                return 0
        if struct_value:
            struct_value = False
            if c != 123 and c != 110:
                return 0
        if elem_start:
            elem_start = False
            if c != 123 and c != 93:
                return 0
        if list_value:
            list_value = False
            open_objects_only = c == 91
        if c == 34:
            in_str = True
            if expect_key:
                is_key = True
                expect_key = False
                h = 0
                klen = 0
        elif c == 123 or c == 91:
            if depth + 1 >= MAX_DEPTH:
                return 0
            depth += 1
            if c == 123:
                objects |= 1 << depth
                objstart[depth] = nkeys
                expect_key = True
            else:
                objects &= ~(1 << depth)
                expect_key = False
                if open_objects_only:
                    objects_only |= 1 << depth
                    elem_start = True
                else:
                    objects_only &= ~(1 << depth)
            open_objects_only = False
        elif c == 125 or c == 93:
            is_object = (objects >> depth) & 1
            if depth == 0 or (c == 125 and is_object == 0) or (c == 93 and is_object == 1):
                return 0
            if c == 125:
                nkeys = objstart[depth]
            depth -= 1
            if depth == 0 and i != end - 1:
                return 0
        elif c == 44:
            expect_key = depth > 0 and ((objects >> depth) & 1) == 1
            elem_start = depth > 0 and not expect_key and ((objects_only >> depth) & 1) == 1
        elif c == 58:
            after_colon = special
            list_value = list_key
            struct_value = struct_key
            special = False
            list_key = False
            struct_key = False
        elif c == 78 or c == 73:  # NaN, Infinity
            return 0
        i += 1
    return 1 if depth == 0 and not in_str and utf8_left == 0 else 0


def screen_host(values: list[bytes], limit: int) -> list[bool]:
    """:func:`screen_row` on the CPU, for tests and as the reference of the device kernel."""
    keys = np.zeros(MAX_KEYS, dtype=np.int64)
    objstart = np.zeros(MAX_DEPTH, dtype=np.int64)
    return [screen_row(value, 0, len(value), limit, keys, objstart) == 1 for value in values]


class DeviceScreen:
    """The compiled kernel; :meth:`run` screens a whole batch with one launch."""

    def __init__(self) -> None:
        """Compile :func:`screen_row` for the device (numba-cuda ships with cuDF)."""
        cuda = importlib.import_module("numba.cuda")
        numba = importlib.import_module("numba")
        row = cuda.jit(device=True)(screen_row)
        int64 = numba.int64

        def kernel(chars: Any, offsets: Any, limit: int, out: Any) -> None:
            i = cuda.grid(1)
            if i < out.size:
                keys = cuda.local.array(MAX_KEYS, int64)
                objstart = cuda.local.array(MAX_DEPTH, int64)
                out[i] = row(chars, offsets[i], offsets[i + 1], limit, keys, objstart)

        self._cuda = cuda
        self._kernel = cuda.jit(kernel)

    def run(self, chars: np.ndarray[Any, Any], offsets: np.ndarray[Any, Any], limit: int) -> np.ndarray[Any, Any]:
        """Screen ``len(offsets) - 1`` bodies laid end to end in ``chars``; a uint8 mask on the host."""
        n = len(offsets) - 1
        out = self._cuda.device_array(n, dtype=np.uint8)
        if n:
            threads = 128
            blocks = (n + threads - 1) // threads
            d_chars = self._cuda.to_device(chars if len(chars) else np.zeros(1, dtype=np.uint8))
            self._kernel[blocks, threads](d_chars, self._cuda.to_device(offsets), limit, out)
        result: np.ndarray[Any, Any] = out.copy_to_host()
        return result
