"""A deterministic corpus of realistic vLLM bodies, and a file format so two hosts parse identical bytes.

:mod:`gpu_stage.synth` gives ~fixed-size bodies with the connector's kind mix (chat completions with
JSON, fenced JSON, prose or tool calls; stream chunks; error bodies). Real traffic also has a spread of
sizes, non-ASCII text, reasoning fields and malformed records, which change parser speed (long
strings, multi-byte UTF-8, the dead-letter path), so this module adds them on top, by seed.
"""

from __future__ import annotations

import hashlib
import random
import struct
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from gpu_stage.synth import SynthConfig, bodies

MAGIC = b"LLMPIPE-CORPUS1\n"
_LEN = struct.Struct("<I")

SIZES: tuple[tuple[int, float], ...] = ((400, 0.20), (1024, 0.50), (2048, 0.20), (8192, 0.08), (32768, 0.02))
"""(target body bytes, share): mostly ~1 KB answers, a tail of long ones."""


def parse_sizes(text: str) -> tuple[tuple[int, float], ...]:
    """A ``--sizes`` option: ``400:0.2,1024:0.5`` → ((400, 0.2), (1024, 0.5))."""
    pairs = [part.split(":") for part in text.split(",") if part]
    return tuple((int(size), float(share)) for size, share in pairs)


_CJK = "订单延迟到达退款花了两周但是客服很有礼貌账单发票配送质量价格保修服务产品团队問題確認ありがとう"
_CJK_TOPICS = ("退款", "配送", "账单", "客服", "品質")
_INVALID_CONTENT = (
    '{"sentiment": "positive", "score": 0.',  # cut off by max_tokens
    '```json\n{"sentiment": "neutral", "score": 1.5, "risk_level": "low"}\n```',  # above maximum
    '{"sentiment": "happy", "score": 0.5, "risk_level": "low"}',  # not in the enum
    '{"sentiment": "neutral", "score": 0.5, "risk_level": "low", "confidence": 0.9}',  # extra key
    '[{"sentiment": "neutral"}]',  # not an object
)
_REASONING = ("The user", "reports", "a late", "delivery;", "weigh", "refund", "policy", "and tone", "first.")


@dataclass(frozen=True)
class CorpusConfig:
    """Generator knobs; the same config always gives the same bytes."""

    records: int = 50_000
    seed: int = 20250301
    bad_rate: float = 0.01
    cjk_rate: float = 0.10
    reasoning_rate: float = 0.15
    invalid_content_rate: float = 0.03
    sizes: tuple[tuple[int, float], ...] = SIZES


@dataclass(frozen=True)
class Corpus:
    """Bodies plus the facts a result file needs to say what was measured."""

    values: list[bytes]
    config: dict[str, Any]

    @property
    def bytes(self) -> int:
        """Total body bytes."""
        return sum(map(len, self.values))

    def sha256(self) -> str:
        """Digest of the length-prefixed bodies: equal digests mean equal inputs on both hosts."""
        digest = hashlib.sha256()
        for value in self.values:
            digest.update(_LEN.pack(len(value)))
            digest.update(value)
        return digest.hexdigest()

    def facts(self) -> dict[str, Any]:
        """Size and digest of the corpus for the result JSON."""
        sizes = sorted(map(len, self.values))
        n = max(len(sizes), 1)
        return {
            "records": len(self.values),
            "bytes": self.bytes,
            "mean_body_bytes": round(self.bytes / n, 1),
            "p50_body_bytes": sizes[n // 2] if sizes else 0,
            "p99_body_bytes": sizes[min(n - 1, n * 99 // 100)] if sizes else 0,
            "sha256": self.sha256(),
            "warp_longest_to_mean": warp_longest_to_mean(self.values),
            "config": self.config,
        }


WARP = 32
"""Threads of a CUDA warp: the device lane gives each body of a batch, in order, one thread."""


def warp_longest_to_mean(values: list[bytes]) -> float:
    """Mean over each run of 32 consecutive bodies of its longest body's length, over the mean length.

    A warp's threads step together, so with one thread per body a warp walks as long as its longest
    body: this ratio is how much longer the walk takes, in bytes, than with bodies of equal length
    in every warp (1.0). Bodies past the last whole warp are left out.
    """
    whole = len(values) // WARP * WARP
    if not whole:
        return 1.0
    lengths = [len(v) for v in values[:whole]]
    longest = sum(max(lengths[i : i + WARP]) for i in range(0, whole, WARP)) / (whole // WARP)
    mean = sum(lengths) / whole
    return round(longest / mean, 3) if mean else 1.0


def _cjk_text(rng: random.Random, n_bytes: int) -> str:
    """CJK prose of about ``n_bytes`` UTF-8 bytes (3 bytes per character), BMP only."""
    return "".join(rng.choice(_CJK) for _ in range(max(1, n_bytes // 3)))


def _with_cjk(rng: random.Random, message: dict[str, Any]) -> None:
    content = message.get("content")
    if not isinstance(content, str):
        return
    try:
        payload = orjson.loads(content)
    except orjson.JSONDecodeError:
        message["content"] = _cjk_text(rng, len(content))
        return
    if isinstance(payload, dict):
        payload["topics"] = [rng.choice(_CJK_TOPICS) for _ in range(rng.randint(1, 3))]
        message["content"] = orjson.dumps(payload).decode()


def _with_reasoning(rng: random.Random, message: dict[str, Any], size: int) -> None:
    words: list[str] = []
    while sum(map(len, words)) < size // 4:
        words.append(rng.choice(_REASONING))
    key = "reasoning" if rng.random() < 0.5 else "reasoning_content"
    message[key] = " ".join(words)


def _malformed(rng: random.Random, value: bytes) -> bytes:
    """One of the broken bodies a proxy or a crashed server produces, derived from a real one."""
    kind = rng.randrange(7)
    if kind == 0:  # truncated mid-body
        return value[: rng.randint(1, max(1, len(value) - 1))]
    if kind == 1:  # a byte that is not UTF-8
        cut = rng.randint(1, max(1, len(value) - 2))
        return value[:cut] + b"\xff" + value[cut:]
    if kind == 2:  # an SSE line stored as the body
        return b"data: " + value
    if kind == 3:  # a JSON value that is not an object
        return b"[" + value + b"]"
    body = orjson.loads(value) if value.startswith(b"{") else {}
    if kind == 4:
        body.pop("id", None)
        body.pop("error", None)
    elif kind == 5:
        body["created"] = "yesterday"
        body.pop("error", None)
    else:
        body["choices"] = {"index": 0}
        body.pop("error", None)
    return orjson.dumps(body)


def _mutate(rng: random.Random, value: bytes, size: int, cfg: CorpusConfig) -> bytes:
    """CJK text, reasoning fields and content that fails the schema on some chat completions."""
    roll_cjk, roll_reason, roll_invalid = rng.random(), rng.random(), rng.random()
    if b'"chat.completion"' not in value or (
        roll_cjk >= cfg.cjk_rate and roll_reason >= cfg.reasoning_rate and roll_invalid >= cfg.invalid_content_rate
    ):
        return value
    body = orjson.loads(value)
    message = body["choices"][0]["message"]
    if roll_invalid < cfg.invalid_content_rate and message.get("content") is not None:
        message["content"] = rng.choice(_INVALID_CONTENT)
    if roll_cjk < cfg.cjk_rate:
        _with_cjk(rng, message)
    if roll_reason < cfg.reasoning_rate and message.get("content") is not None:
        _with_reasoning(rng, message, size)
    return orjson.dumps(body)


def generate(cfg: CorpusConfig) -> Corpus:
    """``cfg.records`` bodies: synth's kind mix per size bucket, interleaved, mutated, some broken."""
    rng = random.Random(cfg.seed)
    targets = [t for t, _ in cfg.sizes]
    weights = [w for _, w in cfg.sizes]
    picks = rng.choices(range(len(targets)), weights=weights, k=cfg.records)
    pools = [
        iter(bodies(picks.count(k), SynthConfig(seed=cfg.seed + 7919 * (k + 1), target_bytes=t)))
        for k, t in enumerate(targets)
    ]
    values: list[bytes] = []
    for k in picks:
        value = _mutate(rng, next(pools[k]), targets[k], cfg)
        if rng.random() < cfg.bad_rate:
            value = _malformed(rng, value)
        values.append(value)
    config = asdict(cfg)
    config["sizes"] = [list(s) for s in cfg.sizes]
    return Corpus(values, config)


def write(corpus: Corpus, path: Path) -> None:
    """Length-prefixed bodies after a header line holding the config (bodies may contain newlines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        out.write(MAGIC)
        head = orjson.dumps(corpus.config)
        out.write(_LEN.pack(len(head)) + head)
        for value in corpus.values:
            out.write(_LEN.pack(len(value)))
            out.write(value)


def _chunks(data: memoryview, start: int) -> Iterable[bytes]:
    pos = start
    while pos < len(data):
        (n,) = _LEN.unpack_from(data, pos)
        yield bytes(data[pos + 4 : pos + 4 + n])
        pos += 4 + n


def read(path: Path, limit: int | None = None) -> Corpus:
    """A corpus written by :func:`write`; ``limit`` keeps the first records only."""
    data = memoryview(path.read_bytes())
    if bytes(data[: len(MAGIC)]) != MAGIC:
        msg = f"{path} is not a corpus file"
        raise ValueError(msg)
    (n,) = _LEN.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + 4
    config = orjson.loads(bytes(data[start : start + n]))
    values: list[bytes] = []
    for value in _chunks(data, start + n):
        if limit is not None and len(values) >= limit:
            break
        values.append(value)
    config["source"] = str(path)
    return Corpus(values, config)
