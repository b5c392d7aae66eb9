"""Host-side pieces of the GPU backend that need no cuDF: the pre-screen and the slow lane.

The pre-screen decides, with a few byte scans per body, which bodies the device reader may see at
all; everything else (and every row the device later declines) goes through :func:`reference_row`,
which is the CPU backend's per-record path, so the slow lane is byte-identical by construction.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gpu_stage.transform.contract.content import ContentValidator
from gpu_stage.transform.contract.extract import BadBody, extract
from gpu_stage.transform.contract.reference import NOT_AN_OBJECT_TEXT, TOO_LARGE_TEXT, decode_failure
from llmpipe.dlq import Reason

_CONTROL = bytes(range(0x20))
_UNSAFE_TOKENS = (b"\\u", b"NaN", b"Infinity", b" :")
"""Substrings the device path does not reproduce exactly: ``\\u`` escapes (lone surrogates must be
rejected, the device reader does not), non-finite number tokens, and a space before a colon (the
duplicate-key count below reads key tokens as ``":``)."""
_NULL_MESSAGE = (re.compile(rb'"message"\s*:\s*null'), re.compile(rb'"delta"\s*:\s*null'))
"""The device reader cannot tell ``"message": null`` from an absent key, and the contract treats them
differently. Two patterns with literal prefixes, because ``re`` scans for a literal prefix quickly."""


def key_tokens(text: bytes) -> int:
    r"""An upper bound of the number of object keys in JSON ``text`` with no space before a colon.

    Exact unless a string starts with a colon or three backslashes precede an escaped quote. A key
    ends in ``":``; inside a string every quote is escaped, so ``\":`` is no key, ``\\":`` (an escaped
    backslash closing the key) is one. Runs of three or more backslashes count as keys:
    the error only ever adds, which keeps :func:`has_duplicate_keys` conservative.
    """
    return text.count(b'":') - text.count(b'\\":') + text.count(b'\\\\":')


def has_duplicate_keys(value: bytes, obj: dict[str, Any]) -> bool:
    r"""Whether some object in ``value`` may repeat a key (orjson keeps the last, cuDF the first).

    ``obj`` is ``orjson.loads(value)``, in which repeated keys are already merged; its re-encoding
    holds every surviving string byte for byte (no ``\u`` escapes reach here; ``\/`` becomes ``/``,
    which touches no backslash run before a quote), so its
    :func:`key_tokens` count equals the body's when no key repeats and is smaller when one does.
    Keys of different objects may share a name (``id`` of a body and of its tool calls): that is no
    repeat, and such bodies stay on the device. Needs no space before a colon (checked earlier).
    Bodies too deep to re-encode count as repeating (the slow lane decides them).
    """
    try:
        encoded = orjson.dumps(obj)
    except orjson.JSONEncodeError:  # nested deeper than orjson writes (254 levels): not decided here
        return True
    return key_tokens(value) != key_tokens(encoded)


def device_safe(value: bytes, limit: int) -> bool:
    """Whether a body may go to the device reader; False sends it to the slow lane.

    The checks, cheapest first: size limit, starts with ``{`` and ends with ``}``, no raw control
    bytes (a raw newline would split the JSON-lines buffer), none of :data:`_UNSAFE_TOKENS`, no
    explicit null message/delta, a strict JSON object by orjson (this also rejects invalid UTF-8 and
    the trailing brackets ``{...}}`` the device reader would accept), objects where the reader
    declares objects (:func:`_objects_in_lists`), and no key repeated within one object (:func:`has_duplicate_keys`).
    """
    if len(value) > limit or value[:1] != b"{" or value[-1:] != b"}":
        return False
    if len(value.translate(None, _CONTROL)) != len(value):
        return False
    if any(token in value for token in _UNSAFE_TOKENS):
        return False
    if any(pattern.search(value) is not None for pattern in _NULL_MESSAGE):
        return False
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return type(obj) is dict and _objects_in_lists(obj) and not has_duplicate_keys(value, obj)


def _objects_in_lists(obj: dict[str, Any]) -> bool:
    """Whether the values the reader declares as objects are objects (or null, or absent).

    That is ``choices`` elements, ``usage`` and its ``prompt_tokens_details``, each choice's
    ``message``/``delta``, their ``tool_calls`` elements and those elements' ``function``. The
    device reader may give a value of another type (``"choices": ["x"]``) as an empty struct, so
    the row would look good, where the reference rejects it (``wrong_type``).
    """
    usage = obj.get("usage")
    if usage is not None and (type(usage) is not dict or not _object_or_null(usage.get("prompt_tokens_details"))):
        return False
    choices = obj.get("choices")
    if type(choices) is not list:
        return True
    for choice in choices:
        if type(choice) is not dict:
            return False
        for key in ("message", "delta"):
            message = choice.get(key)
            if not _object_or_null(message):
                return False
            calls = message.get("tool_calls") if type(message) is dict else None
            if type(calls) is not list:
                continue
            for call in calls:
                if type(call) is not dict or not _object_or_null(call.get("function")):
                    return False
    return True


def _object_or_null(value: Any) -> bool:
    return value is None or type(value) is dict


def reference_row(value: bytes, validator: ContentValidator, limit: int) -> tuple[Any, ...] | tuple[Reason, str]:
    """The CPU backend's per-record rules: typed values, or ``(reason, error text)`` for a dead letter.

    Mirrors the loop body of :meth:`gpu_stage.transform.contract.reference.ReferenceBackend.parse`; the GPU parity tests
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
