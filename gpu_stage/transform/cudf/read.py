"""The device half of the GPU backend: read a JSON-lines buffer with cuDF and pick the fast lane.

Two reads of the same buffer, both with the declared schema below (never inferred) and
``on_bad_lines='recover'``:

* the *token* read (``keep_quotes=True``, all columns kept, every leaf declared as string): each leaf
  comes back as its JSON token text, so the type checks of the contract (string vs number vs
  boolean, integer spelling and range) are regex tests on the device, and unknown top-level keys
  show up as extra columns;
* the *value* read (``prune_columns=True``): the same leaves with JSON string escapes decoded.

A row is in the fast lane only when every rule it touches can be decided from those columns exactly
as the reference does; the caller sends every other row to the slow lane (the CPU reference).
Leaves that are integers are converted on the device; the first choice is picked on the device.
Copying the chosen columns to the host and the second-stage parse of content / tool arguments
(``gpu_stage.transform.contract.content``) run on the CPU, per fast row.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from typing import Any

from gpu_stage.transform.cudf import source as gpu_source
from gpu_stage.transform.stages import StageClock

log = logging.getLogger(__name__)

OBJECT_TOKENS = ('"chat.completion"', '"chat.completion.chunk"', '"text_completion"')
INT64_TOKEN = r"^(0|-?[1-9][0-9]{0,17})$"
"""Integer spellings that surely fit int64 (at most 18 digits, no leading zero, no ``-0``)."""
INT32_TOKEN = r"^(0|-?[1-9][0-9]{0,8})$"
CREATED_TOKEN = r"^(0|[1-9][0-9]{0,14})$"
"""Non-negative integer seconds whose milliseconds fit int64 comfortably."""
TYPED_TOP = ("id", "object", "created", "model", "choices", "usage", "system_fingerprint", "service_tier")


class DeviceReadError(Exception):
    """The device reader could not give a row-aligned result; the caller runs the batch on the CPU."""


@dataclass(frozen=True)
class FastRows:
    """Host copies of the fast-lane rows.

    ``lane[i]`` says whether line ``i`` is fast; columns hold values of the fast rows only, in line
    order (names follow ``gpu_stage.transform.contract.extract.BODY_FIELDS``).
    """

    lane: list[bool]
    columns: dict[str, list[Any]]


def declared_dtypes(cudf: Any) -> dict[str, Any]:
    """The declared reader schema: only what the contract reads, every leaf a string."""
    s = cudf.dtype("str")
    function = cudf.StructDtype({"name": s, "arguments": s})
    calls = cudf.ListDtype(cudf.StructDtype({"function": function}))
    message = cudf.StructDtype({"content": s, "reasoning": s, "reasoning_content": s, "tool_calls": calls})
    choice = cudf.StructDtype(
        {"index": s, "finish_reason": s, "stop_reason": s, "text": s, "message": message, "delta": message}
    )
    details = cudf.StructDtype({"cached_tokens": s})
    usage = cudf.StructDtype(
        {"prompt_tokens": s, "completion_tokens": s, "total_tokens": s, "prompt_tokens_details": details}
    )
    return {
        "id": s, "object": s, "created": s, "model": s, "choices": cudf.ListDtype(choice),
        "usage": usage, "system_fingerprint": s, "service_tier": s,
    }  # fmt: skip


def _same_shape(cudf: Any, declared: Any, actual: Any) -> bool:
    """Whether a returned dtype has the declared nesting (mixed types turn a struct into a string).

    A declared child the batch never contains may be missing; :class:`_Nav` reads it as all-null.
    """
    if isinstance(declared, cudf.StructDtype):
        if not isinstance(actual, cudf.StructDtype):
            return False
        return all(
            _same_shape(cudf, child, actual.fields[name])
            for name, child in declared.fields.items()
            if name in actual.fields
        )
    if isinstance(declared, cudf.ListDtype):
        return isinstance(actual, cudf.ListDtype) and _same_shape(cudf, declared.element_type, actual.element_type)
    return not isinstance(actual, cudf.StructDtype | cudf.ListDtype)


STRICT_OPTIONS = {
    "strict_validation": True,
    "allow_numeric_leading_zeros": False,
    "allow_nonnumeric_numbers": False,
    "allow_unquoted_control_chars": False,
}


def _read(cudf: Any, buf: Any, dtypes: dict[str, Any], *, tokens: bool) -> Any:
    """One read; ``buf`` is host bytes (``cudf.read_json``) or a device buffer (:mod:`gpu_source`)."""
    if not isinstance(buf, bytes):
        return gpu_source.read_device(cudf, buf, dtypes, STRICT_OPTIONS, tokens=tokens)
    kwargs: dict[str, Any] = {
        "engine": "cudf", "lines": True, "dtype": dtypes, "prune_columns": not tokens,
        "on_bad_lines": "recover", "compression": None, "mixed_types_as_string": True, "keep_quotes": tokens,
    }  # fmt: skip
    try:
        return cudf.read_json(io.BytesIO(buf), **kwargs, **STRICT_OPTIONS)
    except TypeError:
        log.warning("cuDF reader lacks the strict validation options; reading without them")
        return cudf.read_json(io.BytesIO(buf), **kwargs)


def _frame(cudf: Any, buf: Any, n: int, dtypes: dict[str, Any], *, tokens: bool) -> Any:
    """One read, checked for row alignment and declared nesting."""
    try:
        df = _read(cudf, buf, dtypes, tokens=tokens)
    except Exception as exc:  # the reader fails in many ways (IndexError seen on mistyped lists)
        msg = f"cuDF read failed: {exc}"
        raise DeviceReadError(msg) from exc
    if len(df) != n:
        msg = f"cuDF returned {len(df)} rows for {n} lines"
        raise DeviceReadError(msg)
    for name, declared in dtypes.items():
        if name in df.columns and not _same_shape(cudf, declared, df[name].dtype):
            msg = f"column {name!r} came back as {df[name].dtype!r}"
            raise DeviceReadError(msg)
    return df


class _Nav:
    """Null-safe navigation of one read's columns (absent columns read as all-null strings)."""

    def __init__(self, cudf: Any, df: Any) -> None:
        self.cudf = cudf
        self.df = df
        self.n = len(df)

    def nulls(self) -> Any:
        return self.cudf.Series([None] * self.n, dtype=self.cudf.dtype("str"))

    def top(self, name: str) -> Any:
        return self.df[name] if name in self.df.columns else None

    def field(self, parent: Any, name: str) -> Any:
        if parent is None or name not in parent.dtype.fields:
            return None
        child = parent.struct.field(name)
        if isinstance(child.dtype, self.cudf.StructDtype | self.cudf.ListDtype):
            return child
        return child.where(parent.notnull())

    def first(self, lists: Any) -> Any:
        return None if lists is None else lists.list.get(0)

    def length(self, lists: Any) -> Any:
        if lists is None:
            return self.cudf.Series([0] * self.n, dtype="int32")
        return lists.list.len().fillna(0)

    def leaf(self, s: Any) -> Any:
        if s is None:
            return self.nulls()
        return s if s.dtype == self.cudf.dtype("str") else s.astype("str")

    def present(self, s: Any) -> Any:
        if s is None:
            return self.cudf.Series([False] * self.n)
        return s.notnull()


def _is_str(tok: Any) -> Any:
    return tok.str.startswith('"').fillna(False)


def _str_or_null(tok: Any) -> Any:
    return tok.isnull() | _is_str(tok)


def _matches(tok: Any, pattern: str) -> Any:
    return tok.str.contains(pattern, regex=True).fillna(False)


def _int_or_null(tok: Any, pattern: str = INT64_TOKEN) -> Any:
    return tok.isnull() | _matches(tok, pattern)


def _message_ok(nav: _Nav, msg: Any) -> Any:
    """Type rules of the contract for a message/delta object, decided on token text."""
    ok = _str_or_null(nav.leaf(nav.field(msg, "content")))
    ok &= _str_or_null(nav.leaf(nav.field(msg, "reasoning")))
    ok &= _str_or_null(nav.leaf(nav.field(msg, "reasoning_content")))
    function = nav.field(nav.first(nav.field(msg, "tool_calls")), "function")
    ok &= _str_or_null(nav.leaf(nav.field(function, "name")))
    ok &= _str_or_null(nav.leaf(nav.field(function, "arguments")))
    return ok


def _usage_ok(nav: _Nav, usage: Any) -> Any:
    ok = nav.cudf.Series([True] * nav.n)
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        ok &= _int_or_null(nav.leaf(nav.field(usage, name)))
    details = nav.field(usage, "prompt_tokens_details")
    ok &= _int_or_null(nav.leaf(nav.field(details, "cached_tokens")))
    return ok


def fast_mask(nav: _Nav) -> tuple[Any, Any, Any]:
    """Rows whose every contract rule is decidable from the token read; also which of message/delta."""
    ok = _is_str(nav.leaf(nav.top("id")))
    ok &= nav.leaf(nav.top("object")).isin(list(OBJECT_TOKENS)).fillna(False)
    ok &= _matches(nav.leaf(nav.top("created")), CREATED_TOKEN)
    ok &= nav.present(nav.top("choices")) & (nav.length(nav.top("choices")) <= 1)
    for name in ("model", "system_fingerprint", "service_tier"):
        ok &= _str_or_null(nav.leaf(nav.top(name)))
    for name in nav.df.columns:
        if name not in TYPED_TOP:
            ok &= nav.df[name].isnull()
    choice = nav.first(nav.top("choices"))
    ok &= _int_or_null(nav.leaf(nav.field(choice, "index")), INT32_TOKEN)
    ok &= _str_or_null(nav.leaf(nav.field(choice, "finish_reason")))
    stop = nav.leaf(nav.field(choice, "stop_reason"))
    ok &= _str_or_null(stop) | _matches(stop, INT64_TOKEN)
    message, delta = nav.field(choice, "message"), nav.field(choice, "delta")
    use_msg = nav.present(message)
    use_delta = ~use_msg & nav.present(delta)
    use_text = ~use_msg & ~use_delta
    lane = (use_msg & _message_ok(nav, message)) | (use_delta & _message_ok(nav, delta))
    lane |= use_text & _str_or_null(nav.leaf(nav.field(choice, "text")))
    ok &= lane & _usage_ok(nav, nav.top("usage"))
    return ok.fillna(False), use_msg, use_delta


def _host(s: Any) -> list[Any]:
    values: list[Any] = s.to_arrow().to_pylist()
    return values


def _as_int(tok: Any) -> Any:
    """Integer tokens as int64 on the device; anything else (only in slow rows) becomes null first."""
    return tok.where(_matches(tok, INT64_TOKEN)).astype("int64")


def read_fast(
    cudf: Any, buf: bytes, n: int, clock: StageClock | None = None, stage: gpu_source.PinnedStage | None = None
) -> FastRows:
    """Read ``n`` JSON lines from ``buf`` on the device; host columns of the fast rows.

    With a pinned ``stage`` the buffer is copied to the device once and both reads parse it there;
    without one, each read hands cuDF the host bytes.
    """
    clock = clock or StageClock()
    dtypes = declared_dtypes(cudf)
    source: Any = buf
    if stage is not None:
        with clock.stage("copy_in"):
            source = stage.upload(buf)
    with clock.stage("read_tokens"):
        tokens = _Nav(cudf, _frame(cudf, source, n, dtypes, tokens=True))
    with clock.stage("read_values"):
        values = _Nav(cudf, _frame(cudf, source, n, dtypes, tokens=False))
    with clock.stage("mask"):
        mask, use_msg, use_delta = fast_mask(tokens)
        lane: list[bool] = _host(mask)
    with clock.stage("columns"):
        columns = _columns(tokens, values, mask, use_msg, use_delta)
    return FastRows(lane, columns)


def _under(nav: _Nav, msg: Any, path: tuple[str, ...]) -> Any:
    """A leaf below a message/delta; ``"[0]"`` in ``path`` takes a list's first element."""
    node = msg
    for step in path:
        node = nav.first(node) if step == "[0]" else nav.field(node, step)
    return nav.leaf(node)


def _pick(nav: _Nav, use_msg: Any, use_delta: Any, choice: Any, path: tuple[str, ...], text: str | None) -> Any:
    """Choice 0's leaf at ``path`` from message, else delta, else (for content) the choice's ``text``."""
    from_msg = _under(nav, nav.field(choice, "message"), path)
    from_delta = _under(nav, nav.field(choice, "delta"), path)
    other = nav.leaf(nav.field(choice, text)) if text else nav.nulls()
    return from_msg.where(use_msg, from_delta.where(use_delta, other.where(~use_msg & ~use_delta)))


def _columns(tok: _Nav, val: _Nav, mask: Any, use_msg: Any, use_delta: Any) -> dict[str, list[Any]]:
    """Fast-lane columns, computed on the device for all rows and copied to the host for fast rows."""
    tchoice, vchoice = tok.first(tok.top("choices")), val.first(val.top("choices"))
    stop_tok = tok.leaf(tok.field(tchoice, "stop_reason"))
    stop = stop_tok.where(~_is_str(stop_tok), val.leaf(val.field(vchoice, "stop_reason")))
    reasoning = _pick(val, use_msg, use_delta, vchoice, ("reasoning",), None)
    reasoning_content = _pick(val, use_msg, use_delta, vchoice, ("reasoning_content",), None)
    reasoning = reasoning.where(reasoning.notnull(), reasoning_content)
    function = ("tool_calls", "[0]", "function")
    usage = tok.top("usage")
    device = {
        "completion_id": val.leaf(val.top("id")),
        "object": val.leaf(val.top("object")),
        "created": _as_int(tok.leaf(tok.top("created"))) * 1000,
        "model": val.leaf(val.top("model")),
        "finish_reason": val.leaf(val.field(vchoice, "finish_reason")),
        "stop_reason": stop,
        "content_text": _pick(val, use_msg, use_delta, vchoice, ("content",), "text"),
        "reasoning": reasoning,
        "tool_name": _pick(val, use_msg, use_delta, vchoice, (*function, "name"), None),
        "tool_arguments": _pick(val, use_msg, use_delta, vchoice, (*function, "arguments"), None),
        "num_choices": tok.length(tok.top("choices")),
        "index": _as_int(tok.leaf(tok.field(tchoice, "index"))),
        "prompt_tokens": _as_int(tok.leaf(tok.field(usage, "prompt_tokens"))),
        "completion_tokens": _as_int(tok.leaf(tok.field(usage, "completion_tokens"))),
        "total_tokens": _as_int(tok.leaf(tok.field(usage, "total_tokens"))),
        "cached_tokens": _as_int(tok.leaf(tok.field(tok.field(usage, "prompt_tokens_details"), "cached_tokens"))),
        "system_fingerprint": val.leaf(val.top("system_fingerprint")),
        "service_tier": val.leaf(val.top("service_tier")),
    }
    return {name: _host(col[mask]) for name, col in device.items()}
