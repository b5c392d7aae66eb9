"""Decide what a request's completion says: per-choice text, reasoning, tool calls and stop facts.

The result (a ``Completion``) is independent of how it is delivered, so the unary body and the
SSE stream of the same request carry the same facts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import orjson

from vllm_sim import schema_gen
from vllm_sim.rng import hex_id
from vllm_sim.words import cjk, prose, tokens, words

DEMO_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "neutral", "negative"]},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "risk_level": {"type": "string", "enum": ["low", "medium", "high"]},
        "topics": {"type": "array", "items": {"type": "string"}},
        "needs_review": {"type": "boolean"},
    },
    "required": ["sentiment", "score", "risk_level"],
}
_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
}
_STOP_TOKEN_ID = 128008


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call the model made; ``arguments`` is a JSON string, as on the wire."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Choice:
    """One generated choice."""

    index: int
    content: str | None
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    stop_reason: int | str | None
    tokens_generated: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Counted once here: the latency model, the usage block and the token metric all need it,
        # and tokenizing long content is the costliest step of answering a request.
        count = len(self.pieces()) + (len(tokens(self.reasoning)) if self.reasoning else 0)
        count += sum(len(tokens(t.arguments)) for t in self.tool_calls)
        object.__setattr__(self, "tokens_generated", count)

    def pieces(self) -> list[str]:
        """The content's tokens (empty when there is no content)."""
        return tokens(self.content) if self.content else []

    def token_count(self) -> int:
        """Generated tokens: content, reasoning and tool-call arguments."""
        return self.tokens_generated


@dataclass(frozen=True, slots=True)
class Completion:
    """Everything the body says, before it is shaped as unary JSON or as stream chunks."""

    suffix: str
    created: int
    model: str
    choices: tuple[Choice, ...]
    prompt_tokens: int

    @property
    def completion_tokens(self) -> int:
        """Usage counts cover all choices."""
        return sum(c.token_count() for c in self.choices)


def prompt_tokens(payload: dict[str, Any]) -> int:
    """Rough token count of the prompt: words of every message plus a per-message template cost."""
    messages = payload.get("messages")
    if isinstance(messages, list):
        text = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        return len(tokens(text)) + 7 * len(messages)
    return len(tokens(str(payload.get("prompt", "")))) + 1


def response_schema(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The schema the reply must satisfy, from ``response_format`` (json_schema or json_object)."""
    fmt = payload.get("response_format")
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return schema if isinstance(schema, dict) else {"type": "object"}
    if fmt.get("type") == "json_object":
        return DEMO_OBJECT_SCHEMA
    return None


def _kind(rng: random.Random, mix: dict[str, float]) -> str:
    kinds = [k for k, w in mix.items() if w > 0]
    return rng.choices(kinds, weights=[mix[k] for k in kinds])[0] if kinds else "prose"


def _demo_json(rng: random.Random) -> str:
    return orjson.dumps(schema_gen.generate(DEMO_OBJECT_SCHEMA, rng)).decode()


def _text_for(
    kind: str, rng: random.Random, long_scale: int = 1
) -> tuple[str | None, str | None, tuple[ToolCall, ...]]:
    """Content, reasoning and tool calls for one choice of the given kind."""
    if kind == "cjk":
        return cjk(rng, rng.randint(1, 4)), None, ()
    if kind == "json":
        return _demo_json(rng), None, ()
    if kind == "fenced":
        return f"Here is the assessment:\n```json\n{_demo_json(rng)}\n```", None, ()
    if kind == "invalid_json":
        return _demo_json(rng)[: -rng.randint(2, 8)], None, ()
    if kind == "reasoning":
        return prose(rng, rng.randint(1, 3)), prose(rng, rng.randint(2, 6)), ()
    if kind == "tool_call":
        args = orjson.dumps(schema_gen.generate(_TOOL_SCHEMA, rng)).decode()
        return None, None, (ToolCall(f"chatcmpl-tool-{hex_id(rng)}", "get_weather", args),)
    if kind == "long":
        return prose(rng, rng.randint(80, 160) * long_scale), None, ()
    return prose(rng, rng.randint(1, 5)), None, ()


def _stop_facts(
    rng: random.Random, content: str | None, max_tokens: int | None
) -> tuple[str, int | str | None]:
    if max_tokens is not None and content is not None and len(tokens(content)) >= max_tokens:
        return "length", None
    return "stop", rng.choice((None, None, _STOP_TOKEN_ID, "\n"))


def _truncate(content: str | None, max_tokens: int | None) -> str | None:
    if content is None or max_tokens is None:
        return content
    return "".join(tokens(content)[:max_tokens])


def _choice(
    index: int, rng: random.Random, payload: dict[str, Any], mix: dict[str, float], long_scale: int = 1
) -> Choice:
    schema = response_schema(payload)
    max_tokens = payload.get("max_tokens") or payload.get("max_completion_tokens")
    max_tokens = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None
    if schema is not None:
        body = orjson.dumps(schema_gen.generate(schema, rng)).decode()
        return Choice(index, body, None, (), "stop", None)
    content, reasoning, calls = _text_for(_kind(rng, mix), rng, long_scale)
    if calls:
        return Choice(index, None, reasoning, calls, "tool_calls", None)
    finish, stop = _stop_facts(rng, content, max_tokens)
    return Choice(index, _truncate(content, max_tokens), reasoning, (), finish, stop)


def plan(
    payload: dict[str, Any],
    rng: random.Random,
    model: str,
    mix: dict[str, float],
    now: int,
    long_scale: int = 1,
) -> Completion:
    """Decide the whole completion for one request (``long_scale`` multiplies ``long`` content)."""
    n = payload.get("n")
    count = n if isinstance(n, int) and 1 <= n <= 16 else 1
    suffix = hex_id(rng)
    choices = tuple(_choice(i, rng, payload, mix, long_scale) for i in range(count))
    name = payload.get("model") if isinstance(payload.get("model"), str) else model
    return Completion(suffix, now, str(name), choices, prompt_tokens(payload))


def completion_text(rng: random.Random, max_tokens: int | None) -> tuple[str, str, int | str | None]:
    """Text, finish_reason and stop_reason for ``/v1/completions``."""
    text = " " + words(rng, rng.randint(3, 40))
    finish, stop = _stop_facts(rng, text, max_tokens)
    return _truncate(text, max_tokens) or "", finish, stop
