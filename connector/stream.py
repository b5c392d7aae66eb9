"""Reassemble a vLLM SSE stream of ``chat.completion.chunk``s into the unary ``chat.completion`` body.

The result has the same keys, in the same order, as vLLM's non-streaming body, so downstream parsing
is identical whichever way the completion was captured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from llmpipe.errors import SourceError


class StreamIncomplete(SourceError):
    """The stream ended without ``data: [DONE]`` (connection dropped): the call may be retried."""


class StreamErrorEvent(SourceError):
    """The server sent an error event inside an HTTP 200 stream."""


@dataclass(slots=True)
class _Choice:
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tools: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    stop_reason: int | str | None = None

    def add(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        if delta.get("content"):
            self.text.append(delta["content"])
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            self.reasoning.append(reasoning)
        for call in delta.get("tool_calls") or []:
            self._tool(call)
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
            self.stop_reason = choice.get("stop_reason")

    def _tool(self, call: dict[str, Any]) -> None:
        slot = self.tools.setdefault(call.get("index", 0), {"id": None, "name": None, "arguments": []})
        slot["id"] = call.get("id") or slot["id"]
        function = call.get("function") or {}
        slot["name"] = function.get("name") or slot["name"]
        if function.get("arguments"):
            slot["arguments"].append(function["arguments"])

    def message(self) -> dict[str, Any]:
        calls = [
            {
                "id": t["id"],
                "type": "function",
                "function": {"name": t["name"], "arguments": "".join(t["arguments"])},
            }
            for _, t in sorted(self.tools.items())
        ]
        text = "".join(self.text)
        return {
            "role": "assistant",
            "content": None if calls and not text else text,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": calls,
            "reasoning_content": "".join(self.reasoning) or None,
        }


@dataclass(slots=True)
class Reassembler:
    """Feed SSE lines; :meth:`body` returns the unary body once ``[DONE]`` was seen."""

    envelope: dict[str, Any] = field(default_factory=dict)
    choices: dict[int, _Choice] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    done: bool = False
    chunks: int = 0

    def feed(self, line: str) -> None:
        """Consume one line of the event stream (blank lines and comments are ignored)."""
        if not line.startswith("data:"):
            return
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return
        chunk = orjson.loads(data)
        if "error" in chunk:
            raise StreamErrorEvent(orjson.dumps(chunk["error"]).decode())
        self.chunks += 1
        if not self.envelope:
            self.envelope = {k: chunk.get(k) for k in ("id", "created", "model")}
        for choice in chunk.get("choices") or []:
            self.choices.setdefault(choice.get("index", 0), _Choice()).add(choice)
        if chunk.get("usage"):
            self.usage = chunk["usage"]

    def body(self) -> bytes:
        """The reassembled ``chat.completion`` body (vLLM's key order, unset fields as null)."""
        if not self.done:
            msg = f"stream ended after {self.chunks} chunks without [DONE]"
            raise StreamIncomplete(msg)
        usage = dict(self.usage or {})
        usage.setdefault("prompt_tokens_details", None)
        body = {
            "id": self.envelope.get("id"),
            "object": "chat.completion",
            "created": self.envelope.get("created"),
            "model": self.envelope.get("model"),
            "choices": [
                {
                    "index": index,
                    "message": c.message(),
                    "logprobs": None,
                    "finish_reason": c.finish_reason,
                    "stop_reason": c.stop_reason,
                    "token_ids": None,
                }
                for index, c in sorted(self.choices.items())
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": {k: usage.get(k) for k in ("prompt_tokens", "total_tokens", "completion_tokens")}
            | {"prompt_tokens_details": usage["prompt_tokens_details"]},
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "kv_transfer_params": None,
        }
        return orjson.dumps(body)
