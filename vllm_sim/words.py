"""Word lists and text builders for prose, CJK and tokenization."""

from __future__ import annotations

import random
import re

_ENGLISH_TEXT = (
    "the model reads a message and writes an answer about risk sentiment review data pipeline "
    "customer order delivery late refund account payment quality support team latency token "
    "stream batch record schema field value typed kafka flink query window metric signal "
    "happy angry neutral clear short long simple careful useful likely rarely often"
)
ENGLISH: tuple[str, ...] = tuple(_ENGLISH_TEXT.split())
CJK = "模型读取消息并写出关于风险情绪审核数据管道客户订单延迟退款账户付款质量支持团队"
_TOKEN = re.compile(
    r"\s*(?:[\u3000-\u9fff\uff00-\uffef]|[A-Za-z0-9_]+|[^\sA-Za-z0-9_\u3000-\u9fff\uff00-\uffef])|\s+"
)


def words(rng: random.Random, count: int) -> str:
    """``count`` English words separated by spaces."""
    return " ".join(rng.choice(ENGLISH) for _ in range(count))


def prose(rng: random.Random, sentences: int) -> str:
    """Capitalised English sentences."""
    out = []
    for _ in range(sentences):
        sentence = words(rng, rng.randint(5, 14))
        out.append(sentence[0].upper() + sentence[1:] + ".")
    return " ".join(out)


def cjk(rng: random.Random, sentences: int) -> str:
    """Chinese sentences (raw UTF-8 on the wire, as vLLM sends them)."""
    return "".join(
        "".join(rng.choice(CJK) for _ in range(rng.randint(6, 16))) + "。" for _ in range(sentences)
    )


def tokens(text: str) -> list[str]:
    """Split text into pieces that concatenate back to it.

    One piece per word, number, punctuation mark or CJK character. The pieces are
    the simulator's tokens: they set usage counts and the stream's deltas.
    """
    return _TOKEN.findall(text)
