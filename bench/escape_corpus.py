r"""Bodies whose strings spell every JSON escape at random, at both levels: inputs for parity, not speed.

Every string value of a body (id, object, model, finish and stop reasons, content, reasoning, tool name
and arguments, error messages, system fingerprint) and now and then a key is written with a random
mix of spellings: raw, the short escapes ``\" \\ \/ \b \f \n \r \t``, ``\u00XX`` for control
characters, ``\uXXXX`` (either hex case) for any BMP character, CJK included, and surrogate pairs
for characters beyond it. The JSON a model writes (content objects, tool arguments) is spelled the
same way first and then, being a string of the body, once more. About 1 % of the bodies hold a lone
surrogate escape (``\ud800``) in a body string, which makes the body invalid JSON
(``gpu_stage/transform/contract/semantics.md`` §1), and about 1 % in a string of their content
JSON or tool arguments, which makes only that JSON invalid. Same records and seed, same bytes.

Shares: chat completions 70 % (content JSON 65 % of them, 15 % of which fenced and 20 % rejected by
the schema; prose 20 %; tool calls 15 %), and in equal parts stream chunks, text completions and
error bodies. A key is spelled with an escape 3 % of the time (``"\u0065rror"`` is ``error``).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any

import orjson

from bench import real_text as text
from bench.corpus import Corpus

SEED = 20250301
SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
SPECIALS = (
    '"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x01", "\x1b", "\x1f", "\x7f", "\x85", "\xa0", "é", "ß",
    "€", "中", "文", "配", "ア", "한", "😀", "🚚", "𝄞", "\u2028", "\u2029", "\ufeff", "\uffff", "\\u00e9", "```",
)  # fmt: skip
"""Characters a string is salted with (``\\\\u00e9`` is a backslash and five letters: no escape once decoded)."""
WORDS = ("stop", "order", "late", "refund", "Qwen/Qwen2.5", "hello world", "{", "}", "[", "]", ":", ",", "null", "0.5")
LONE = ("\ud800", "\udbff", "\udc00", "\udfff")
"""Surrogates alone: a Python string holds them, JSON only as an escape, and then the text is invalid."""
_TOKENS = re.compile(r'([\x20\x21\x23-\x2e\x30-\x5b\x5d-\x7e]+)|.', re.DOTALL)
"""A run of printable ASCII that needs no escape (group 1), or one other character."""


def _u(rng: random.Random, code: int) -> str:
    r"""``\uXXXX`` for a BMP code point, a surrogate pair beyond it; lower or upper hex at random."""
    spelling = "\\u%04x" if rng.random() < 0.7 else "\\u%04X"
    if code <= 0xFFFF:
        return spelling % code
    code -= 0x10000
    return spelling % (0xD800 + (code >> 10)) + spelling % (0xDC00 + (code & 0x3FF))


def _char(rng: random.Random, ch: str, rate: float) -> str:
    code = ord(ch)
    must = ch in '"\\' or code < 0x20 or 0xD800 <= code <= 0xDFFF
    if not must and rng.random() >= rate:
        return ch
    if ch in SHORT and rng.random() < 0.6:
        return SHORT[ch]
    return _u(rng, code)


def _plain(rng: random.Random, run: str, rate: float) -> str:
    if rate >= 1.0:
        return "".join(_u(rng, ord(c)) for c in run)
    if rng.random() >= rate:
        return run
    at = rng.randrange(len(run))
    return run[:at] + _u(rng, ord(run[at])) + run[at + 1 :]


def spell(rng: random.Random, value: str, rate: float) -> str:
    """``value`` as a JSON string literal, each character raw or escaped at random (``rate``: how often)."""
    out = ['"']
    for match in _TOKENS.finditer(value):
        run = match.group(1)
        out.append(_plain(rng, run, rate) if run else _char(rng, match.group(), rate))
    out.append('"')
    return "".join(out)


class Writer:
    """Writes a JSON value with every string spelled by :func:`spell` and this body's spacing."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.rate = rng.choice((0.05, 0.3, 0.7, 1.0))
        self.comma, self.colon = rng.choice(((",", ":"), (", ", ": "), (",\n  ", " : "), ("\t,\r\n", ":\t")))

    def value(self, v: Any) -> str:
        """``v`` as JSON text."""
        if isinstance(v, str):
            return spell(self.rng, v, self.rate)
        if isinstance(v, dict):
            items = (self.key(k) + self.colon + self.value(x) for k, x in v.items())
            return "{" + self.comma.join(items) + "}"
        if isinstance(v, list):
            return "[" + self.comma.join(map(self.value, v)) + "]"
        return orjson.dumps(v).decode()

    def key(self, k: str) -> str:
        """A key, now and then with one character escaped (a parser must decode keys too)."""
        return spell(self.rng, k, 0.5) if self.rng.random() < 0.03 else spell(self.rng, k, 0.0)


class _Strings:
    """A body's random string values: real-looking ones salted with specials; what was drawn, as labels."""

    def __init__(self, rng: random.Random, lone_inner: bool) -> None:
        self.rng = rng
        self.lone_inner = lone_inner
        self.labels: list[str] = []

    def salted(self, base: str, pieces: int = 3) -> str:
        """``base`` as is (half the time) or with up to ``pieces`` specials and words around it."""
        rng = self.rng
        if rng.random() < 0.5:
            return base
        parts = [base, *(rng.choice(SPECIALS if rng.random() < 0.6 else WORDS) for _ in range(rng.randint(1, pieces)))]
        rng.shuffle(parts)
        return "".join(parts)

    def prose(self) -> str:
        """Prose with specials in it."""
        return self.salted(text.prose(self.rng, text.length(self.rng, 200, 0.8, 5, 3000)), 12)

    def inner(self, value: dict[str, Any] | list[Any]) -> str:
        """JSON a model wrote, as text; where this body is to have one, with a lone surrogate in a string."""
        if self.lone_inner:
            self.lone_inner = False
            self.labels.append("lone surrogate in the JSON of a string")
            value = [*value, "x\ud800"] if isinstance(value, list) else value | {"topics": [self.rng.choice(LONE)]}
        return Writer(self.rng).value(value)


def _payload(strings: _Strings) -> tuple[str, Any]:
    """A content object (valid or not) whose strings hold specials; its kind."""
    rng = strings.rng
    if rng.random() < 0.8:
        value: Any = text.payload(rng)
        kind = "valid"
    else:
        kind, value = text.invalid_payload(rng)
    if isinstance(value, dict) and isinstance(value.get("topics"), list):
        value["topics"] = [strings.salted(t) if isinstance(t, str) else t for t in value["topics"]]
    return kind, value


def _content(strings: _Strings) -> tuple[Any, list[Any]]:
    """A chat message's content and tool calls."""
    rng = strings.rng
    roll = rng.random()
    if roll < 0.65:
        kind, value = _payload(strings)
        inner = strings.inner(value)
        fenced = rng.random() < 0.15
        strings.labels.append(f"content json {kind}" + (" fenced" if fenced else ""))
        return (text.fenced(rng, inner) if fenced else inner), []
    if roll < 0.85:
        strings.labels.append("content prose")
        return strings.prose(), []
    strings.labels.append("tool call")
    args = {"query": strings.salted("late order"), "limit": rng.randint(1, 99), "exact": rng.random() < 0.5,
            strings.salted("note", 1): strings.prose()}  # fmt: skip
    call = {"id": strings.salted(f"chatcmpl-tool-{rng.getrandbits(64):016x}"), "type": "function",
            "function": {"name": strings.salted(rng.choice(text.TOOL_NAMES)), "arguments": strings.inner(args)}}
    return None, [call]


def _chat(strings: _Strings) -> dict[str, Any]:
    rng = strings.rng
    content, calls = _content(strings)
    message = {"role": "assistant", "content": content, "tool_calls": calls,
               "reasoning_content": strings.prose() if rng.random() < 0.2 else None}  # fmt: skip
    finish = rng.choice(("stop", "length", "tool_calls", "abort"))
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": strings.salted(finish),
              "stop_reason": rng.choice((None, 128009, strings.salted("\n")))}  # fmt: skip
    return _envelope(strings, "chat.completion", choice) | {"system_fingerprint": strings.salted("vllm-0.10.2")}


def _envelope(strings: _Strings, obj: str, choice: dict[str, Any]) -> dict[str, Any]:
    rng = strings.rng
    prompt, completion = rng.randint(1, 5000), rng.randint(1, 900)
    return {
        "id": strings.salted(f"chatcmpl-{rng.getrandbits(128):032x}"),
        "object": obj,
        "created": 1_740_000_000 + rng.randrange(10**7),
        "model": strings.salted(rng.choice(("Qwen/Qwen2.5-7B-Instruct", "/models/8b", "deepseek-r1:8b"))),
        "choices": [choice],
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion},
    }


def _other(strings: _Strings) -> dict[str, Any]:
    """A stream chunk, a text completion or an error body."""
    rng = strings.rng
    roll = rng.random()
    if roll < 1 / 3:
        strings.labels.append("chunk")
        choice = {"index": 0, "delta": {"content": strings.salted(text.delta(rng))}, "finish_reason": None}
        return _envelope(strings, "chat.completion.chunk", choice)
    if roll < 2 / 3:
        strings.labels.append("text completion")
        words = strings.inner(_payload(strings)[1]) if rng.random() < 0.4 else strings.prose()
        choice = {"index": 0, "text": words, "finish_reason": strings.salted("length")}
        return _envelope(strings, "text_completion", choice)
    strings.labels.append("error")
    error = {"message": strings.prose(), "type": strings.salted("BadRequestError"), "param": None, "code": 400}
    return {"object": "error", **error} if rng.random() < 0.5 else {"error": error}


def _leaves(body: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """(container, key) of every string value in ``body``."""
    pairs = body.items() if isinstance(body, dict) else enumerate(body) if isinstance(body, list) else ()
    for key, value in pairs:
        if isinstance(value, str):
            out.append((body, key))
        else:
            _leaves(value, out)
    return out


def _one(rng: random.Random, counts: Counter[str]) -> bytes:
    roll = rng.random()
    strings = _Strings(rng, lone_inner=0.01 <= roll < 0.02)
    body = _chat(strings) if rng.random() < 0.7 else _other(strings)
    if roll < 0.01:  # a lone surrogate in a string of the body itself: invalid JSON
        container, key = rng.choice(_leaves(body, []))
        at = rng.randint(0, len(container[key]))
        container[key] = container[key][:at] + rng.choice(LONE) + container[key][at:]
        strings.labels.append("lone surrogate in the body")
    counts.update(strings.labels)
    return Writer(rng).value(body).encode()


def escape_bodies(records: int, seed: int = SEED) -> Corpus:
    """``records`` bodies full of escapes (module docstring); the config counts what was drawn."""
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    values = [_one(rng, counts) for _ in range(records)]
    config = {"corpus": "escapes", "records": records, "seed": seed, "counts": dict(sorted(counts.items()))}
    return Corpus(values, config)
