"""Streaming: chunk shapes, the usage-only chunk, and the same facts as the unary reply."""

from __future__ import annotations

import json

import httpx
import openai

MSG = [{"role": "user", "content": "stream me"}]


def _collect(client: openai.OpenAI, rid: str, **extra: object) -> list[openai.types.chat.ChatCompletionChunk]:
    stream = client.chat.completions.create(
        model="m",
        messages=MSG,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Request-Id": rid},
        **extra,  # type: ignore[arg-type]
    )
    return list(stream)


def test_usage_chunk_last_with_empty_choices(client: openai.OpenAI) -> None:
    chunks = _collect(client, "s-1")
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and chunks[0].object == "chat.completion.chunk"


def test_sse_framing_ends_with_done(sim_url: str) -> None:
    body = {"model": "m", "messages": MSG, "stream": True}
    raw = httpx.post(f"{sim_url}/v1/chat/completions", json=body, headers={"X-Request-Id": "s-2"}).content
    events = raw.split(b"\n\n")
    assert events[-2] == b"data: [DONE]" and events[-1] == b""
    assert all(e.startswith(b"data: ") for e in events[:-1])
    # exclude_unset: no usage key on chunks when include_usage is off.
    assert all("usage" not in json.loads(e[6:]) for e in events[:-2])


def test_stream_reassembles_to_unary_facts(client: openai.OpenAI) -> None:
    for i in range(60):
        rid = f"parity-{i}"
        unary = client.chat.completions.create(
            model="m", messages=MSG, n=2, extra_headers={"X-Request-Id": rid}
        )  # type: ignore[arg-type]
        chunks = _collect(client, rid, n=2)
        texts: dict[int, str] = {}
        finish: dict[int, str | None] = {}
        args: dict[int, str] = {}
        for chunk in chunks:
            for ch in chunk.choices:
                texts[ch.index] = texts.get(ch.index, "") + (ch.delta.content or "")
                if ch.delta.tool_calls:
                    args[ch.index] = args.get(ch.index, "") + (
                        ch.delta.tool_calls[0].function.arguments or ""
                    )  # type: ignore[union-attr]
                if ch.finish_reason:
                    finish[ch.index] = ch.finish_reason
        assert chunks[0].id == unary.id
        for choice in unary.choices:
            assert texts[choice.index] == (choice.message.content or "")
            assert finish[choice.index] == choice.finish_reason
            if choice.message.tool_calls:
                assert args[choice.index] == choice.message.tool_calls[0].function.arguments  # type: ignore[union-attr]
        assert chunks[-1].usage == unary.usage.model_copy(update={"prompt_tokens_details": None})  # type: ignore[union-attr]
