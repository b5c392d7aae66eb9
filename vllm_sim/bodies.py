"""Shape completions as vLLM (0.10.x line) writes them: unary bodies, SSE chunks and error bodies.

Unary bodies carry every model field, unset ones as ``null`` (``model_dump()``); stream chunks carry
only the keys vLLM sets (``exclude_unset``); the usage-only chunk drops nulls and has ``choices: []``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from vllm_sim.content import Choice, Completion
from vllm_sim.words import tokens


def usage(completion: Completion) -> dict[str, Any]:
    """Usage with vLLM's key order: prompt, total, completion."""
    done = completion.completion_tokens
    return {
        "prompt_tokens": completion.prompt_tokens,
        "total_tokens": completion.prompt_tokens + done,
        "completion_tokens": done,
        "prompt_tokens_details": None,
    }


def _tool_calls(choice: Choice) -> list[dict[str, Any]]:
    return [
        {"id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.arguments}}
        for t in choice.tool_calls
    ]


def _message(choice: Choice) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": choice.content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": _tool_calls(choice),
        "reasoning_content": choice.reasoning,
    }


def chat_body(completion: Completion) -> bytes:
    """The non-streaming ``chat.completion`` body, compact UTF-8 JSON."""
    body = {
        "id": f"chatcmpl-{completion.suffix}",
        "object": "chat.completion",
        "created": completion.created,
        "model": completion.model,
        "choices": [
            {
                "index": c.index,
                "message": _message(c),
                "logprobs": None,
                "finish_reason": c.finish_reason,
                "stop_reason": c.stop_reason,
                "token_ids": None,
            }
            for c in completion.choices
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage(completion),
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "kv_transfer_params": None,
    }
    return orjson.dumps(body)


def _chunk(completion: Completion, choice: dict[str, Any]) -> bytes:
    envelope = {
        "id": f"chatcmpl-{completion.suffix}",
        "object": "chat.completion.chunk",
        "created": completion.created,
        "model": completion.model,
        "choices": [choice],
    }
    return orjson.dumps(envelope)


def _delta_choice(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": None, "token_ids": None}


def _choice_deltas(choice: Choice) -> Iterator[dict[str, Any]]:
    """Deltas of one choice: role, reasoning pieces, content pieces, tool-call opening and fragments."""
    yield {"role": "assistant", "content": ""}
    for piece in tokens(choice.reasoning) if choice.reasoning else []:
        yield {"reasoning_content": piece}
    for piece in choice.pieces():
        yield {"content": piece}
    for pos, call in enumerate(choice.tool_calls):
        opening = {"name": call.name, "arguments": ""}
        yield {"tool_calls": [{"index": pos, "id": call.id, "type": "function", "function": opening}]}
        for piece in tokens(call.arguments):
            yield {"tool_calls": [{"index": pos, "function": {"arguments": piece}}]}


def stream_chunks(completion: Completion, include_usage: bool) -> Iterator[bytes]:
    """Every ``data:`` payload of the stream, without framing; the caller adds ``[DONE]``."""
    for choice in completion.choices:
        for delta in _choice_deltas(choice):
            yield _chunk(completion, _delta_choice(choice.index, delta))
        final = {
            "index": choice.index,
            "delta": {"content": ""},
            "logprobs": None,
            "finish_reason": choice.finish_reason,
            "stop_reason": choice.stop_reason,
            "token_ids": None,
        }
        yield _chunk(completion, final)
    if include_usage:
        done = completion.completion_tokens
        tail = {
            "id": f"chatcmpl-{completion.suffix}",
            "object": "chat.completion.chunk",
            "created": completion.created,
            "model": completion.model,
            "choices": [],
            "usage": {
                "prompt_tokens": completion.prompt_tokens,
                "total_tokens": completion.prompt_tokens + done,
                "completion_tokens": done,
            },
        }
        yield orjson.dumps(tail)


def text_completion_body(
    suffix: str,
    created: int,
    model: str,
    choices: list[tuple[str, str, int | str | None]],
    prompt_tokens: int,
) -> bytes:
    """The ``/v1/completions`` body (``text_completion``)."""
    done = sum(len(tokens(text)) for text, _, _ in choices)
    body = {
        "id": f"cmpl-{suffix}",
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": i,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": stop,
                "prompt_logprobs": None,
            }
            for i, (text, finish, stop) in enumerate(choices)
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + done,
            "completion_tokens": done,
            "prompt_tokens_details": None,
        },
        "kv_transfer_params": None,
    }
    return orjson.dumps(body)


ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "TooManyRequestsError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """The nested error shape of vLLM 0.10.1+: ``{"error": {message, type, param, code}}``."""
    err = {
        "message": message,
        "type": ERROR_TYPES.get(status, "InternalServerError"),
        "param": param,
        "code": status,
    }
    return orjson.dumps({"error": err})


def models_body(model: str, created: int, max_model_len: int) -> bytes:
    """``GET /v1/models`` as vLLM lists its served model."""
    card = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [],
    }
    return orjson.dumps({"object": "list", "data": [card]})
