r"""A corpus shaped like production vLLM traffic, each body made from one of the real bodies in ``real_bodies/``.

:mod:`bench.corpus` builds its bodies from :mod:`gpu_stage.synth`'s fixed shapes. Here every body starts
as one of the 15 bodies real vLLM servers sent (``real_bodies/SOURCES.md`` says where each comes from):
it is parsed, its id, timestamps, model, usage, finish and text are replaced, and it is written again
the way a server, proxy or log tool writes it. Same records and seed, same bytes.

Shares (of all bodies unless said otherwise; ``config["mix"]`` holds them, ``config["counts"]`` what
one run drew):

* kind: non-streaming chat completion 70 % (templates 04, 10 to 15), chat stream chunk 12 % (05 first,
  06 middle, 07 final, a usage-only final chunk), text completion 9 % (01, 08, 09), completion stream
  chunk 6 % (02, 03), error body 3 % (vLLM's flat ``{"object": "error", …}`` 55 %, the nested
  ``{"error": {…}}`` 35 %, a proxy's ``{"error": "…"}`` 10 %);
* chat content: schema-valid JSON compact 28 %, indented 8 %, in a ```` ```json ```` fence 10 %;
  JSON the content schema rejects 6 % (wrong enum, out of range, extra key, missing key, wrong type,
  not an object); JSON cut at ``max_tokens`` 3 %; English prose 20 % (quotes, apostrophes, newlines,
  tabs, Windows paths, some CJK sentences and emoji); CJK prose 3 %; ``<think>…</think>`` inline then
  an answer 8 %; tool calls 12 % (flat JSON arguments with escaped strings, 6 % of them not an
  object); reasoning only, content null 2 %. 15 % of the other chat bodies carry a reasoning field
  (``reasoning_content``, ``reasoning`` or both, as their template has it) of up to ~15 KB;
* the JSON a model writes: compact raw UTF-8 40 %, ``json.dumps`` spacing 40 % (``\uXXXX`` escapes
  in three quarters of it), indented 20 %; its free-text strings hold ``\"``, ``\\``, ``\n``, ``\t`` and non-ASCII,
  which the body escapes once more (``\\\"``, ``\\u00e9`` …);
* serialization of the body: orjson compact (raw UTF-8) 65 %, ``json.dumps(ensure_ascii=True)``
  (every non-ASCII character a ``\uXXXX`` escape, emoji as surrogate pairs) 20 %, indented 10 %,
  indented with sorted keys (as ``jq -S``, template 15) 5 %; stream chunks are never indented (a
  drawn indented layout is compact for them);
* broken bodies ``bad_rate`` (default 1 %): truncated, a byte that is not UTF-8, an SSE ``data:``
  line, empty.

Sizes run from under 100 B (a proxy's error) and ~230 B (stream chunks) to ~20 KB (long reasoning),
mean about 1.3 KB, median about 0.8 KB.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench import real_text as text
from bench.corpus import Corpus

BODIES = Path(__file__).resolve().parent / "real_bodies"
SEED = 20250301

KINDS: tuple[tuple[str, float], ...] = (
    ("chat", 0.70),
    ("chat_chunk", 0.12),
    ("text_completion", 0.09),
    ("completion_chunk", 0.06),
    ("error", 0.03),
)
CHAT_CONTENT: tuple[tuple[str, float], ...] = (
    ("json", 0.28),
    ("json_pretty", 0.08),
    ("json_fenced", 0.10),
    ("json_invalid", 0.06),
    ("json_truncated", 0.03),
    ("prose", 0.20),
    ("prose_cjk", 0.03),
    ("think", 0.08),
    ("tool_call", 0.12),
    ("reasoning_only", 0.02),
)
SERIALIZATION: tuple[tuple[str, float], ...] = (("compact", 0.65), ("ascii", 0.20), ("pretty", 0.10), ("sorted", 0.05))
REASONING_SHARE = 0.15
MAX_TEXT_CHARS = 15_000
"""Longest text a chat body gets (content and reasoning together): bodies stay within ~20 KB."""
CHAT_TEMPLATES: tuple[tuple[str, float], ...] = (
    ("04", 0.10), ("10", 0.18), ("11", 0.17), ("12", 0.15), ("13", 0.12), ("14", 0.10), ("15", 0.18),
)  # fmt: skip
"""Newer servers' envelopes (0.10+: more null keys) more often than 0.7's and 0.9's."""
MODELS = ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
          "/models/8b", "mistralai/Mistral-7B-Instruct-v0.3", "google/gemma-2-9b-it")  # fmt: skip
ERRORS = (
    ("BadRequestError", 400, "This model's maximum context length is 8192 tokens. However, you requested 9013 "
     "tokens (8501 in the messages, 512 in the completion). Please reduce the length of the messages or completion."),
    ("BadRequestError", 400, "1 validation error for ChatCompletionRequest\ntemperature\n  Input should be less than "
     "or equal to 2 [type=less_than_equal, input_value=3.0, input_type=float]"),
    ("BadRequestError", 400, "[{'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required', "
     "'input': {'model': 'qwen', 'prompt': 'Say \"hi\"'}}]"),
    ("NotFoundError", 404, "The model `gpt-4o` does not exist."),
    ("InternalServerError", 500, "Internal server error"),
)  # fmt: skip


def _draw(rng: random.Random, mix: tuple[tuple[str, float], ...]) -> str:
    return rng.choices([name for name, _ in mix], weights=[share for _, share in mix])[0]


@functools.cache
def templates() -> dict[str, bytes]:
    """The real bodies by their two-digit number."""
    return {path.name[:2]: path.read_bytes() for path in sorted(BODIES.glob("*.json"))}


def _template(number: str) -> dict[str, Any]:
    """A fresh copy of a real body, to change."""
    body: dict[str, Any] = orjson.loads(templates()[number])
    return body


class _Body:
    """One body being made: the random source, and labels saying what it got (counted per corpus)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.labels: list[str] = []

    def envelope(self, body: dict[str, Any], text_chars: int) -> None:
        """New id, created, model and usage counts, keeping the template's id style and key set."""
        rng = self.rng
        body["id"] = _new_id(rng, body["id"])
        body["created"] = body["created"] + rng.randrange(30 * 86_400)
        if rng.random() < 0.4:
            body["model"] = rng.choice(MODELS)
        if isinstance(body.get("usage"), dict):
            body["usage"] = _usage(rng, body["usage"], text_chars)


def _new_id(rng: random.Random, old: str) -> str:
    """An id like ``old``: its prefix, then as many hex digits, or a UUID where it had one."""
    prefix, _, rest = old.partition("-")
    if "-" in rest:
        return f"{prefix}-{uuid.UUID(int=rng.getrandbits(128), version=4)}"
    return f"{prefix}-{rng.getrandbits(4 * len(rest)):0{len(rest)}x}"


def _usage(rng: random.Random, usage: dict[str, Any], text_chars: int) -> dict[str, Any]:
    prompt = text.length(rng, 300, 1.2, 5, 8000)
    completion = max(1, text_chars // 4)
    out = dict.fromkeys(usage)
    out |= {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
    if "prompt_tokens_details" in usage:
        out["prompt_tokens_details"] = {"cached_tokens": prompt // 2} if rng.random() < 0.1 else None
    return out


def _stop_reason(rng: random.Random, finish: str | None) -> Any:
    """Null mostly; on a stop, now and then the stop token's id or the matched stop string."""
    if finish != "stop" or rng.random() < 0.85:
        return None
    return rng.choice((128009, 151645, "\n", "</answer>", "Observation:"))


# Chat content: each sets the message's content (and what goes with it), returns the finish reason.


def _json_content(b: _Body, message: dict[str, Any]) -> str:
    message["content"] = text.json_text(b.rng, text.payload(b.rng))
    return "stop"


def _pretty_content(b: _Body, message: dict[str, Any]) -> str:
    message["content"] = json.dumps(text.payload(b.rng), indent=2, ensure_ascii=b.rng.random() < 0.3)
    return "stop"


def _fenced_content(b: _Body, message: dict[str, Any]) -> str:
    message["content"] = text.fenced(b.rng, text.json_text(b.rng, text.payload(b.rng)))
    return "stop"


def _invalid_content(b: _Body, message: dict[str, Any]) -> str:
    how, value = text.invalid_payload(b.rng)
    b.labels.append(f"chat content rejected: {how}")
    body = text.json_text(b.rng, value)
    message["content"] = text.fenced(b.rng, body) if b.rng.random() < 0.2 else body
    return "stop"


def _truncated_content(b: _Body, message: dict[str, Any]) -> str:
    message["content"] = text.cut(b.rng, json.dumps(text.payload(b.rng), indent=b.rng.choice((None, 2))))
    return "length"


def _prose_content(b: _Body, message: dict[str, Any]) -> str:
    message["content"] = text.prose(b.rng, text.length(b.rng, 950, 0.9, 20, 12_000))
    return b.rng.choice(("stop", "stop", "stop", "length"))


def _cjk_content(b: _Body, message: dict[str, Any]) -> str:
    message["content"] = text.cjk(b.rng, text.length(b.rng, 200, 0.8, 10, 3000))
    return "stop"


def _think_content(b: _Body, message: dict[str, Any]) -> str:
    rng = b.rng
    thought = text.thinking(rng, text.length(rng, 1200, 0.9, 60, 12_000))
    if rng.random() < 0.15:  # cut inside the thought, as template 12
        message["content"] = "<think>\n" + thought
        return "length"
    answer = text.json_text(rng, text.payload(rng)) if rng.random() < 0.5 else text.prose(rng, 300)
    message["content"] = f"<think>\n{thought}\n</think>\n\n{answer}"
    return "stop"


def _tool_content(b: _Body, message: dict[str, Any]) -> str:
    rng = b.rng
    message["content"] = None if rng.random() < 0.8 else ""
    message["tool_calls"] = [_tool_call(rng, k) for k in range(1 if rng.random() < 0.9 else 2)]
    return "tool_calls"


def _tool_call(rng: random.Random, index: int) -> dict[str, Any]:
    name = rng.choice(text.TOOL_NAMES)
    call_id = f"chatcmpl-tool-{rng.getrandbits(128):032x}" if rng.random() < 0.85 else f"functions.{name}:{index}"
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text.tool_arguments(rng, name)}}


def _reasoning_only(b: _Body, message: dict[str, Any]) -> str:
    message["content"] = None
    _set_reasoning(message, text.thinking(b.rng, text.length(b.rng, 2500, 0.7, 200, 15_000)))
    return "length"


CONTENT: dict[str, Callable[[_Body, dict[str, Any]], str]] = {
    "json": _json_content,
    "json_pretty": _pretty_content,
    "json_fenced": _fenced_content,
    "json_invalid": _invalid_content,
    "json_truncated": _truncated_content,
    "prose": _prose_content,
    "prose_cjk": _cjk_content,
    "think": _think_content,
    "tool_call": _tool_content,
    "reasoning_only": _reasoning_only,
}


def _set_reasoning(message: dict[str, Any], thought: str, room: int = MAX_TEXT_CHARS) -> None:
    """The thought in every reasoning key the template's message has (both in 0.11 to 0.13, template 11).

    Cut to ``room`` characters in all: where it is written twice, each copy gets half.
    """
    keys = [k for k in ("reasoning", "reasoning_content") if k in message] or ["reasoning_content"]
    for key in keys:
        message[key] = thought[: room // len(keys)]


def _chat(b: _Body) -> dict[str, Any]:
    rng = b.rng
    body = _template(_draw(rng, CHAT_TEMPLATES))
    choice = body["choices"][0]
    message = choice["message"]
    kind = _draw(rng, CHAT_CONTENT)
    b.labels.append(f"chat: {kind}")
    choice["finish_reason"] = CONTENT[kind](b, message)
    if kind not in ("tool_call", "reasoning_only") and rng.random() < REASONING_SHARE:
        room = max(100, MAX_TEXT_CHARS - len(message["content"] or ""))  # long answers, short reasoning
        _set_reasoning(message, text.thinking(rng, text.length(rng, 1500, 0.9, 100, room)), room)
        b.labels.append("chat reasoning field")
    choice["stop_reason"] = _stop_reason(rng, choice["finish_reason"])
    written = sum(len(v) for v in message.values() if isinstance(v, str))
    b.envelope(body, written)
    return body


def _chat_chunk(b: _Body) -> dict[str, Any]:
    rng = b.rng
    roll = rng.random()
    if roll < 0.15:
        b.labels.append("chat chunk: first")
        body = _template("05")
    elif roll < 0.82:
        body = _template("06")
        body["choices"][0]["delta"] = _middle_delta(b)
    elif roll < 0.96:
        b.labels.append("chat chunk: final")
        body = _template("07")
        choice = body["choices"][0]
        choice["finish_reason"] = rng.choice(("stop", "stop", "length", "tool_calls"))
        choice["stop_reason"] = _stop_reason(rng, choice["finish_reason"])
    else:
        b.labels.append("chat chunk: usage only")
        body = _template("07")
        body["choices"] = []
        body["usage"] = {"prompt_tokens": 0, "total_tokens": 0, "completion_tokens": 0}
    b.envelope(body, 4)
    return body


def _middle_delta(b: _Body) -> dict[str, Any]:
    rng = b.rng
    roll = rng.random()
    if roll < 0.8:
        b.labels.append("chat chunk: content")
        return {"content": text.delta(rng)}
    if roll < 0.92:
        b.labels.append("chat chunk: reasoning")
        piece = text.delta(rng)
        return {"reasoning": piece, "reasoning_content": piece} if rng.random() < 0.5 else {"reasoning_content": piece}
    b.labels.append("chat chunk: tool call fragment")
    fragment = text.cut(rng, json.dumps({"city": rng.choice(text.CITIES)}))
    return {"tool_calls": [{"index": 0, "function": {"arguments": fragment[rng.randrange(len(fragment)) :]}}]}


def _text_completion(b: _Body) -> dict[str, Any]:
    rng = b.rng
    body = _template(rng.choice(("01", "08", "09")))
    choice = body["choices"][0]
    roll = rng.random()
    if roll < 0.7:
        b.labels.append("text completion: prose")
        choice["text"] = text.prose(rng, text.length(rng, 400, 1.0, 1, 8000))
        choice["finish_reason"] = rng.choice(("stop", "length"))
    elif roll < 0.9:
        b.labels.append("text completion: json")
        choice["text"] = text.json_text(rng, text.payload(rng))
        choice["finish_reason"] = "stop"
    else:
        b.labels.append("text completion: json cut")
        choice["text"] = text.cut(rng, json.dumps(text.payload(rng)))
        choice["finish_reason"] = "length"
    choice["stop_reason"] = _stop_reason(rng, choice["finish_reason"])
    b.envelope(body, len(choice["text"]))
    return body


def _completion_chunk(b: _Body) -> dict[str, Any]:
    rng = b.rng
    last = rng.random() < 0.1
    b.labels.append("completion chunk: " + ("last" if last else "middle"))
    body = _template("03" if last else "02")
    body["choices"][0]["text"] = text.delta(rng)
    b.envelope(body, 4)
    return body


def _error(b: _Body) -> dict[str, Any]:
    rng = b.rng
    kind, code, message = rng.choice(ERRORS)
    param = "temperature" if "temperature" in message else None
    roll = rng.random()
    if roll < 0.55:
        b.labels.append("error: flat")
        return {"object": "error", "message": message, "type": kind, "param": param, "code": code}
    if roll < 0.9:
        b.labels.append("error: nested")
        return {"error": {"message": message, "type": kind, "param": param, "code": code}}
    b.labels.append("error: proxy string")
    return {"error": f"Model {rng.choice(MODELS)} not found or vLLM engine is sleeping."}


KIND: dict[str, Callable[[_Body], dict[str, Any]]] = {
    "chat": _chat,
    "chat_chunk": _chat_chunk,
    "text_completion": _text_completion,
    "completion_chunk": _completion_chunk,
    "error": _error,
}


def serialize(body: Any, layout: str) -> bytes:
    """``body`` written as a server (compact), a Python proxy (ASCII escapes) or a log tool (indented) writes it."""
    if layout == "compact":
        return orjson.dumps(body)
    if layout == "ascii":
        return json.dumps(body, ensure_ascii=True).encode()
    return json.dumps(body, indent=2, ensure_ascii=False, sort_keys=layout == "sorted").encode()


def broken(rng: random.Random, value: bytes) -> tuple[str, bytes]:
    """One of the broken bodies a proxy or a crashed server stores, made from a good one."""
    roll = rng.random()
    if roll < 0.4:
        return "truncated", value[: rng.randint(1, max(1, len(value) - 1))]
    if roll < 0.6:
        cut = rng.randint(1, max(1, len(value) - 2))
        return "not UTF-8", value[:cut] + rng.choice((b"\xff", b"\xc3\x28", b"\xed\xa0\x80")) + value[cut:]
    if roll < 0.85:
        return "SSE line", rng.choice((b"data: " + value + b"\n\n", b"data: [DONE]"))
    return "empty", rng.choice((b"", b" ", b"\n"))


def _one(rng: random.Random, bad_rate: float, counts: Counter[str]) -> bytes:
    b = _Body(rng)
    kind = _draw(rng, KINDS)
    layout = _draw(rng, SERIALIZATION)
    if "chunk" in kind and layout in ("pretty", "sorted"):
        layout = "compact"
    value = serialize(KIND[kind](b), layout)
    counts.update([f"kind: {kind}", f"serialization: {layout}", *b.labels])
    if rng.random() < bad_rate:
        how, value = broken(rng, value)
        counts[f"broken: {how}"] += 1
    return value


def mix(bad_rate: float) -> dict[str, Any]:
    """The shares the generator draws from, for the result file."""
    return {
        "kind": dict(KINDS),
        "chat_content": dict(CHAT_CONTENT),
        "chat_reasoning_field": REASONING_SHARE,
        "chat_templates": dict(CHAT_TEMPLATES),
        "serialization": dict(SERIALIZATION),
        "broken": bad_rate,
    }


def generate(records: int, seed: int = SEED, bad_rate: float = 0.01) -> Corpus:
    """``records`` real-shaped bodies; the config names the templates (by digest), the mix and what was drawn."""
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    values = [_one(rng, bad_rate, counts) for _ in range(records)]
    config = {
        "corpus": "real",
        "records": records,
        "seed": seed,
        "bad_rate": bad_rate,
        "templates": {k: hashlib.sha256(v).hexdigest()[:16] for k, v in templates().items()},
        "mix": mix(bad_rate),
        "counts": dict(sorted(counts.items())),
    }
    return Corpus(values, config)
