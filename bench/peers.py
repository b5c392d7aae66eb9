"""The peers: the extraction written the way a Python user would, with orjson or with msgspec.

Both do gpu_stage's work on the columns the checksum covers
(``gpu_stage/transform/contract/semantics.md``): strict JSON,
required envelope fields, created → epoch ms, choice 0's text, reasoning and first tool call (its
arguments parsed), usage, and the content text's fence strip, nested parse and schema check. The
content schema is written out by hand here (as a peer's author would), not driven by the schema file.
They build each row's values and then drop them: encoding is not part of the peers' work, which
favours them.

``run`` times one peer over a corpus on one core, or on several worker processes forked after the
corpus is in memory (so the bodies are not copied through pipes).
"""

from __future__ import annotations

import math
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec
import orjson

from bench.checksum import Checksum
from llmpipe.errors import ConfigError

OBJECTS = frozenset({"chat.completion", "chat.completion.chunk", "text_completion"})
SENTIMENTS = frozenset({"positive", "neutral", "negative"})
RISKS = frozenset({"low", "medium", "high"})
WS = " \t\n\r"


def candidate(text: str | None) -> str | None:
    """Content text that should be JSON: trimmed, fence removed, starting with ``{`` or ``[``."""
    if text is None:
        return None
    body = text.strip(WS)
    if body.startswith("```"):
        nl = body.find("\n")
        body = "" if nl < 0 else body[nl + 1 :].rstrip(WS)
        body = body.removesuffix("```").strip(WS)
    return body if body[:1] in ("{", "[") else None


def created_ms(v: Any) -> int | None:
    """Integer or float seconds → ms; anything else (or negative) is not a timestamp here."""
    if type(v) is int:
        ms = v * 1000
    elif type(v) is float and math.isfinite(v):
        ms = round(v * 1000.0)
    else:
        return None
    return ms if ms >= 0 else None


def _tool_valid(arguments: Any) -> bool | None:
    if arguments is None:
        return None
    if isinstance(arguments, str):
        try:
            return type(orjson.loads(arguments)) is dict
        except orjson.JSONDecodeError:
            return False
    return type(arguments) is dict


# ---- orjson: dicts and hand-written checks -------------------------------------------------------


def _valid_content(c: Any) -> bool:
    if type(c) is not dict or not {"sentiment", "score", "risk_level"} <= c.keys():
        return False
    if not c.keys() <= {"sentiment", "score", "risk_level", "topics", "needs_review"}:
        return False
    score = c["score"]
    if c["sentiment"] not in SENTIMENTS or c["risk_level"] not in RISKS:
        return False
    if type(score) not in (int, float) or not 0 <= score <= 1:
        return False
    topics = c.get("topics", [])
    if type(topics) is not list or any(type(t) is not str for t in topics):
        return False
    return "needs_review" not in c or type(c["needs_review"]) is bool


def _opt(obj: dict[str, Any], key: str, kind: type) -> Any:
    v = obj.get(key)
    if v is not None and type(v) is not kind:
        raise TypeError(key)
    return v


def _orjson_row(obj: Any, out: Checksum) -> bool:
    """Extract one decoded body into ``out``; False when it is a dead letter."""
    if type(obj) is not dict or obj.get("error") is not None or obj.get("object") == "error":
        return False
    cid, kind, choices = obj.get("id"), obj.get("object"), obj.get("choices")
    ms = created_ms(obj.get("created"))
    if type(cid) is not str or kind not in OBJECTS or ms is None or type(choices) is not list:
        return False
    _opt(obj, "model", str)
    text = reasoning = tool_name = tool_valid = None
    if choices:
        choice = choices[0]
        message = choice.get("message", choice.get("delta"))
        _opt(choice, "finish_reason", str)
        if message is not None:
            text = _opt(message, "content", str)
            reasoning = _opt(message, "reasoning", str)
            if reasoning is None:
                reasoning = _opt(message, "reasoning_content", str)
            calls = _opt(message, "tool_calls", list)
            if calls:
                function = calls[0].get("function") or {}
                tool_name, tool_valid = function.get("name"), _tool_valid(function.get("arguments"))
        else:
            text = _opt(choice, "text", str)
    usage = _opt(obj, "usage", dict) or {}
    tokens = (_opt(usage, "prompt_tokens", int), _opt(usage, "completion_tokens", int),
              _opt(usage, "total_tokens", int))
    content = valid = None
    cand = candidate(text)
    if cand is not None:
        try:
            parsed = orjson.loads(cand)
            valid = _valid_content(parsed)
        except orjson.JSONDecodeError:
            valid = False
        content = parsed if valid else None
    out.add_row(ms, tokens, content, valid, (tool_name, tool_valid), text, reasoning)
    return True


def orjson_extract(values: list[bytes], start: int = 0, stop: int | None = None) -> Checksum:
    """The orjson peer over ``values[start:stop]``."""
    out = Checksum()
    loads = orjson.loads
    for value in values[start:stop]:
        try:
            ok = _orjson_row(loads(value), out)
        except (orjson.JSONDecodeError, TypeError, AttributeError):
            ok = False
        if not ok:
            out.bad += 1
    return out


# ---- msgspec: typed Structs, validation done by the decoder -------------------------------------


class Function(msgspec.Struct):
    """``tool_calls[0].function``."""

    name: str | None = None
    arguments: str | None = None


class ToolCall(msgspec.Struct):
    """One tool call."""

    function: Function | None = None


class Message(msgspec.Struct):
    """``message`` or ``delta``."""

    content: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None


class Choice(msgspec.Struct):
    """One choice."""

    index: int | None = None
    finish_reason: str | None = None
    message: Message | None = None
    delta: Message | None = None
    text: str | None = None


class Usage(msgspec.Struct):
    """Token counts."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class Body(msgspec.Struct):
    """The envelope: required fields have no default, so a missing or null one fails decoding."""

    id: str
    object: Literal["chat.completion", "chat.completion.chunk", "text_completion"]
    created: int | float
    choices: list[Choice]
    model: str | None = None
    usage: Usage | None = None
    error: Any = None


class Content(msgspec.Struct, forbid_unknown_fields=True):
    """The content schema as a Struct: enums as Literals, bounds as Meta, no extra keys."""

    sentiment: Literal["positive", "neutral", "negative"]
    score: Annotated[float, msgspec.Meta(ge=0, le=1)]
    risk_level: Literal["low", "medium", "high"]
    topics: list[str] | msgspec.UnsetType = msgspec.UNSET
    needs_review: bool | msgspec.UnsetType = msgspec.UNSET


_BODY = msgspec.json.Decoder(Body)
_CONTENT = msgspec.json.Decoder(Content)
_ANY = msgspec.json.Decoder()


def _msgspec_content(cand: str | None) -> tuple[dict[str, Any] | None, bool | None]:
    if cand is None:
        return None, None
    try:
        c = _CONTENT.decode(cand)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None, False
    topics = None if c.topics is msgspec.UNSET else c.topics
    return {"score": c.score, "topics": topics}, True


def _msgspec_tool(message: Message) -> tuple[str | None, bool | None]:
    if not message.tool_calls or message.tool_calls[0].function is None:
        return None, None
    function = message.tool_calls[0].function
    if function.arguments is None:
        return function.name, None
    try:
        return function.name, type(_ANY.decode(function.arguments)) is dict
    except msgspec.DecodeError:
        return function.name, False


def msgspec_extract(values: list[bytes], start: int = 0, stop: int | None = None) -> Checksum:
    """The msgspec peer over ``values[start:stop]``."""
    out = Checksum()
    for value in values[start:stop]:
        try:
            # msgspec skips unknown fields without checking their UTF-8; decoding first rejects what
            # orjson and gpu_stage reject (a str input is read from its cached UTF-8, not re-encoded).
            body = _BODY.decode(value.decode("utf-8"))
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
            out.bad += 1
            continue
        ms = created_ms(body.created)
        if body.error is not None or ms is None:
            out.bad += 1
            continue
        text = reasoning = None
        tool: tuple[str | None, bool | None] = (None, None)
        if body.choices:
            choice = body.choices[0]
            message = choice.message or choice.delta
            if message is not None:
                text, reasoning = message.content, message.reasoning
                if reasoning is None:
                    reasoning = message.reasoning_content
                tool = _msgspec_tool(message)
            else:
                text = choice.text
        usage = body.usage or Usage()
        content, valid = _msgspec_content(candidate(text))
        out.add_row(ms, (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens), content, valid, tool,
                    text, reasoning)
    return out


PEERS: dict[str, Callable[[list[bytes], int, int | None], Checksum]] = {
    "orjson": orjson_extract,
    "msgspec": msgspec_extract,
}

_SHARED: list[bytes] = []
"""The corpus as the forked workers see it (inherited memory, never pickled)."""


def _work(task: tuple[str, int, int]) -> Checksum:
    name, start, stop = task
    return PEERS[name](_SHARED, start, stop)


@dataclass
class PeerRun:
    """Seconds (of the median pass) and checksum of one peer run, and every pass's seconds."""

    name: str
    workers: int
    seconds: float
    checksum: Checksum
    pass_seconds: list[float] = field(default_factory=list)


def run(name: str, values: list[bytes], workers: int = 1, passes: int = 1) -> PeerRun:
    """Time peer ``name`` over ``values``: in this process, or split over ``workers`` forked processes.

    The pool is started and warmed before the clock starts: fork cost is not extraction work. With
    several ``passes`` the corpus is extracted that many times (by the same pool) and the median
    pass is the figure; every pass must give the same checksum.
    """
    extract = PEERS[name]
    if workers <= 1:
        extract(values, 0, min(len(values), 1000))
        return _median(name, 1, [_timed(lambda: extract(values, 0, None)) for _ in range(max(1, passes))])
    global _SHARED  # fork shares it with the workers without copying
    _SHARED = values
    step = max(1, math.ceil(len(values) / (workers * 8)))
    tasks = [(name, i, min(i + step, len(values))) for i in range(0, len(values), step)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_work, [(name, 0, min(len(values), 200))] * workers)
        timed = [_timed(lambda: _sum(pool.map(_work, tasks, chunksize=1))) for _ in range(max(1, passes))]
    _SHARED = []
    return _median(name, workers, timed)


def _timed(extract: Callable[[], Checksum]) -> tuple[float, Checksum]:
    start = time.perf_counter()
    checksum = extract()
    return time.perf_counter() - start, checksum


def _sum(parts: list[Checksum]) -> Checksum:
    total = Checksum()
    for part in parts:
        total = total + part
    return total


def _median(name: str, workers: int, timed: list[tuple[float, Checksum]]) -> PeerRun:
    if any(checksum != timed[0][1] for _, checksum in timed):
        msg = f"{name}: passes over the same corpus gave different checksums"
        raise ConfigError(msg)
    pass_seconds = [round(s, 6) for s, _ in timed]
    return PeerRun(name, workers, sorted(pass_seconds)[len(timed) // 2], timed[0][1], pass_seconds)
