"""Deterministic, realistic ~1 KB vLLM bodies for benchmarks and bulk equality runs.

The mix follows what the connector sees: mostly non-streaming chat completions (JSON content, fenced
JSON, prose, tool calls), some stream chunks and completions, a few error bodies. Same seed, same
bytes, so CPU and GPU runs and different hosts measure the same input.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import orjson

from gpu_stage.transform.batch import RawBatch

_WORDS = tuple(
    [
        "the",
        "order",
        "arrived",
        "late",
        "and",
        "the",
        "refund",
        "took",
        "two",
        "weeks",
        "but",
        "support",
        "was",
        "polite",
        "about",
        "it",
        "billing",
        "account",
        "invoice",
        "delivery",
        "quality",
        "price",
        "shipping",
        "warranty",
        "service",
        "product",
        "team",
    ]
)
_MODELS = ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "mistral-7b-instruct")
_ENVELOPE = 540
_FINISH = ("stop", "stop", "stop", "length", "tool_calls")


@dataclass(frozen=True)
class SynthConfig:
    """Knobs of the generator: the seed and the approximate body size in bytes."""

    seed: int = 20250301
    target_bytes: int = 1024


def _prose(rng: random.Random, n_bytes: int) -> str:
    words: list[str] = []
    size = 0
    while size < n_bytes:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


def _content(rng: random.Random, kind: int, pad: int) -> str:
    payload = {
        "sentiment": rng.choice(["positive", "neutral", "negative"]),
        "score": round(rng.random(), 3),
        "risk_level": rng.choice(["low", "medium", "high"]),
        "topics": [rng.choice(_WORDS) for _ in range(rng.randint(0, 3))],
        "needs_review": rng.random() < 0.2,
    }
    text = orjson.dumps(payload).decode()
    if kind == 0:
        return text + " " * max(0, pad - len(text))
    if kind == 1:
        return "```json\n" + text + " " * max(0, pad - len(text) - 12) + "\n```"
    return _prose(rng, pad)


def _chat(rng: random.Random, i: int, cfg: SynthConfig) -> dict[str, object]:
    kind = rng.randrange(4)
    tool = kind == 3
    message: dict[str, object] = {
        "role": "assistant",
        "content": None if tool else _content(rng, kind, cfg.target_bytes - _ENVELOPE),
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": [],
        "reasoning_content": _prose(rng, cfg.target_bytes - _ENVELOPE - 150) if tool else None,
    }
    if tool:
        args = orjson.dumps({"city": rng.choice(["Paris", "Oslo", "Lima"]), "days": rng.randint(1, 9)})
        message["tool_calls"] = [
            {
                "id": f"chatcmpl-tool-{i:08x}",
                "type": "function",
                "function": {"name": "get_weather", "arguments": args.decode()},
            }
        ]
    prompt = rng.randint(20, 4000)
    completion = rng.randint(5, 400)
    return {
        "id": f"chatcmpl-{rng.getrandbits(128):032x}",
        "object": "chat.completion",
        "created": 1740000000 + i,
        "model": rng.choice(_MODELS),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if tool else rng.choice(_FINISH[:4]),
                "stop_reason": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": None,
        },
        "prompt_logprobs": None,
        "kv_transfer_params": None,
    }


def _chunk(rng: random.Random, i: int) -> dict[str, object]:
    return {
        "id": f"chatcmpl-{rng.getrandbits(64):016x}",
        "object": "chat.completion.chunk",
        "created": 1740000000 + i,
        "model": rng.choice(_MODELS),
        "choices": [{"index": 0, "delta": {"content": rng.choice(_WORDS)}, "logprobs": None, "finish_reason": None}],
    }


def bodies(n: int, cfg: SynthConfig | None = None) -> list[bytes]:
    """``n`` bodies: ~88% chat completions, 10% stream chunks, 2% error bodies."""
    config = cfg or SynthConfig()
    rng = random.Random(config.seed)
    out: list[bytes] = []
    for i in range(n):
        roll = rng.random()
        if roll < 0.02:
            body: dict[str, object] = {
                "error": {"message": "Internal server error", "type": "InternalServerError", "param": None, "code": 500}
            }
        elif roll < 0.12:
            body = _chunk(rng, i)
        else:
            body = _chat(rng, i, config)
        out.append(orjson.dumps(body))
    return out


def batch(values: list[bytes], first_offset: int = 0) -> RawBatch:
    """A batch with keys, connector headers and timestamps, as the worker would build it."""
    n = len(values)
    return RawBatch(
        values=values,
        keys=[f"req-{first_offset + i:010d}".encode() for i in range(n)],
        headers=[[("http.status", b"200"), ("latency.ms", b"180"), ("attributes", b'{"arm":"A"}')]] * n,
        topic="llm.raw",
        partitions=[0] * n,
        offsets=list(range(first_offset, first_offset + n)),
        timestamps_ms=[1740000000000 + first_offset + i for i in range(n)],
    )
