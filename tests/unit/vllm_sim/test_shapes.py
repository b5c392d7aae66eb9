"""The simulator's bodies, judged by the official openai SDK's types and by vLLM's key sets."""

from __future__ import annotations

import json

import httpx
import openai
from openai.types import Completion
from openai.types.chat import ChatCompletion

MSG = [{"role": "user", "content": "How was my delivery?"}]
# Keys a vLLM 0.10.2 non-streaming chat body carries (corpus 10), in order.
VLLM_TOP_KEYS = [
    "id",
    "object",
    "created",
    "model",
    "choices",
    "service_tier",
    "system_fingerprint",
    "usage",
    "prompt_logprobs",
    "prompt_token_ids",
    "kv_transfer_params",
]


def _raw(client: openai.OpenAI, rid: str, **extra: object) -> tuple[ChatCompletion, dict[str, object]]:
    resp = client.chat.completions.with_raw_response.create(
        model="m",
        messages=MSG,
        extra_headers={"X-Request-Id": rid},
        **extra,  # type: ignore[arg-type]
    )
    return resp.parse(), json.loads(resp.http_response.content)


def test_unary_chat_parses_into_sdk_type_with_vllm_keys(client: openai.OpenAI) -> None:
    parsed, body = _raw(client, "shape-1")
    assert isinstance(parsed, ChatCompletion)
    assert list(body) == VLLM_TOP_KEYS
    assert parsed.id.startswith("chatcmpl-") and len(parsed.id) == len("chatcmpl-") + 32
    assert parsed.object == "chat.completion"
    assert isinstance(body["created"], int)
    choice = body["choices"][0]  # type: ignore[index]
    assert set(choice) == {"index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids"}
    assert choice["stop_reason"] is None or isinstance(choice["stop_reason"], int | str)
    usage = body["usage"]
    assert list(usage) == ["prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details"]  # type: ignore[arg-type]
    assert parsed.usage is not None
    assert parsed.usage.total_tokens == parsed.usage.prompt_tokens + parsed.usage.completion_tokens


def test_n_choices_are_indexed(client: openai.OpenAI) -> None:
    parsed, _ = _raw(client, "shape-n", n=4)
    assert [c.index for c in parsed.choices] == [0, 1, 2, 3]


def test_mix_covers_every_content_kind(client: openai.OpenAI) -> None:
    seen = {"tool": 0, "reasoning": 0, "cjk": 0, "fenced": 0, "json": 0, "invalid": 0}
    for i in range(300):
        parsed, body = _raw(client, f"mix-{i}")
        msg = parsed.choices[0].message
        if msg.tool_calls:
            call = msg.tool_calls[0]
            assert call.type == "function"
            assert isinstance(json.loads(call.function.arguments), dict)
            assert parsed.choices[0].finish_reason == "tool_calls"
            seen["tool"] += 1
            continue
        text = msg.content or ""
        if body["choices"][0]["message"]["reasoning_content"]:  # type: ignore[index]
            seen["reasoning"] += 1
        if any("\u4e00" <= ch <= "\u9fff" for ch in text):
            seen["cjk"] += 1
        if text.startswith("Here is") and "```json\n" in text:
            seen["fenced"] += 1
        if text.startswith("{"):
            try:
                json.loads(text)
                seen["json"] += 1
            except ValueError:
                seen["invalid"] += 1
    assert all(count > 0 for count in seen.values()), seen


def test_cjk_is_raw_utf8_not_escaped(client: openai.OpenAI) -> None:
    for i in range(200):
        resp = client.chat.completions.with_raw_response.create(
            model="m",
            messages=MSG,
            extra_headers={"X-Request-Id": f"mix-{i}"},  # type: ignore[arg-type]
        )
        raw = resp.http_response.content
        if "模".encode() in raw or "。".encode() in raw:
            assert b"\\u" not in raw
            return
    raise AssertionError("no CJK body in 200 requests")


def test_text_completion_parses(client: openai.OpenAI) -> None:
    resp = client.completions.with_raw_response.create(model="m", prompt="Say something", n=2)
    parsed = resp.parse()
    body = json.loads(resp.http_response.content)
    assert isinstance(parsed, Completion)
    assert parsed.id.startswith("cmpl-") and parsed.object == "text_completion"
    assert len(parsed.choices) == 2
    assert "stop_reason" in body["choices"][0] and "prompt_logprobs" in body["choices"][0]


def test_models_health_metrics(client: openai.OpenAI, sim_url: str) -> None:
    assert [m.id for m in client.models.list()] == ["llmpipe/sim-8b"]
    assert httpx.get(f"{sim_url}/health").status_code == 200
    metrics = httpx.get(f"{sim_url}/metrics").text
    assert "vllm_sim_requests_total" in metrics and "vllm:generation_tokens_total" in metrics


def test_max_tokens_truncates_with_length(client: openai.OpenAI) -> None:
    # Every content kind is longer than 3 tokens, so each content choice must stop for length.
    for i in range(20):
        parsed, _ = _raw(client, f"long-{i}", max_tokens=3)
        choice = parsed.choices[0]
        if choice.message.content is not None:
            assert choice.finish_reason == "length"
            assert len(choice.message.content) < 40
