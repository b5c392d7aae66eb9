"""Host-side pieces of the GPU backend that need no cuDF: the pre-screen and the slow lane.

The pre-screen decides, with a few byte scans per body, which bodies the device reader may see at
all; everything else (and every row the device later declines) goes through :func:`reference_row`,
which is the CPU backend's per-record path, so the slow lane is byte-identical by construction.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gpu_stage.backends.cpu import NOT_AN_OBJECT_TEXT, TOO_LARGE_TEXT, decode_failure
from gpu_stage.content import ContentValidator
from gpu_stage.extract import BadBody, extract
from llmpipe.dlq import Reason

_UNSAFE = re.compile(rb'[\x00-\x1f]|\\u|NaN|Infinity|"(?:message|delta)"\s*:\s*null')
"""Bytes the device path does not reproduce exactly: raw control bytes (a raw newline would split the
JSON-lines buffer), ``\\u`` escapes (lone surrogates must be rejected, the device reader does not),
non-finite number tokens, and an explicit ``null`` message/delta (the device reader cannot tell
``"message": null`` from an absent key, and the contract treats them differently)."""


def device_safe(value: bytes, limit: int) -> bool:
    """Whether a body may go to the device reader; False sends it to the slow lane.

    Cheap by design (length, first/last byte, one regex scan, a UTF-8 check only for non-ASCII), so
    the pre-screen never costs more than a small part of a per-record JSON parse.
    """
    if len(value) > limit or value[:1] != b"{" or value[-1:] != b"}":
        return False
    if _UNSAFE.search(value) is not None:
        return False
    if value.count(b"{") != value.count(b"}") or value.count(b"[") != value.count(b"]"):
        return False  # the device reader accepts trailing brackets (``{...}}``) that strict JSON rejects
    if not value.isascii():
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


def reference_row(value: bytes, validator: ContentValidator, limit: int) -> tuple[Any, ...] | tuple[Reason, str]:
    """The CPU backend's per-record rules: typed values, or ``(reason, error text)`` for a dead letter.

    Mirrors the loop body of :meth:`gpu_stage.backends.cpu.CpuBackend.parse`; the GPU parity tests
    compare both backends on every shared vector, so a drift between the two would show there.
    """
    if len(value) > limit:
        return Reason.TOO_LARGE, TOO_LARGE_TEXT
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError:
        return decode_failure(value)
    if type(obj) is not dict:
        return Reason.NOT_AN_OBJECT, NOT_AN_OBJECT_TEXT
    try:
        return extract(obj, validator)
    except BadBody as exc:
        return exc.reason, exc.text
