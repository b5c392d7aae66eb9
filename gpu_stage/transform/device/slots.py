"""Where the device lane keeps a row's values between its two passes, and the tables it reads.

Pass 1 records, per row, where each column's value lies in an int64 slot array; pass 2 writes
the Avro datum from those slots. This module names the slots, the results pass 1 can give besides a
size (:data:`NOT_TAKEN`, :data:`UPSTREAM_ERROR` and the constant dead letters), the key tables the
walk matches names against, and the columns of the content property table
(:class:`gpu_stage.transform.device.tables.ContentTables`). The host imports these constants; the
kernels are compiled with them.
"""

# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from typing import Any

import numpy as np

if "skip_ws" not in globals():  # a plain import; compile_lane runs the sources in order, jitted
    from gpu_stage.transform.device.record import (
        RECORD_END,
    )
    from gpu_stage.transform.device.strict import (
        V_INVALID_JSON,
        V_INVALID_UTF8,
        V_NOT_OBJECT,
    )


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)

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
# 43 to RECORD_END: the record columns (:mod:`gpu_stage.transform.device.record`).
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


REASONING_CONTENT = NSLOTS  # a temporary slot triple after the persistent ones
NSLOTS_ALL = NSLOTS + 3
# Temporary choice slots: positions of message, delta and text values (-1: absent).
MESSAGE_AT = NSLOTS_ALL
DELTA_AT = NSLOTS_ALL + 1
TEXT_AT = NSLOTS_ALL + 2
SLOT_COUNT = NSLOTS_ALL + 3

# Pass 2's spans (``gpu_stage.transform.device.emit.put_dec_text``): a row's long strings, noted by the
# thread that writes the row and copied after it by a warp a row. Per row, column 0 counts them and
# each takes three columns from SPAN_FIRST on: where its text lies in the decoded values, where its
# bytes go in the output, its length (~length where escapes are to be decoded).
SPAN_MIN = 32
"""A string of at least this many bytes goes to a span; a shorter one is copied where it is (a
warp's step is 32 bytes)."""
SPAN_FIRST = 1
SPANS = 8
"""Spans a row may note by default (``Executor.write_spans``): a chat row's content twice, its
reasoning, tool arguments and the longer of its other strings; a string past them is copied where it is."""


def span_columns(spans: int) -> int:
    """Columns of a row of the spans array for ``spans`` spans a row (0: one column, which notes none)."""
    return SPAN_FIRST + 3 * max(spans, 0)
