"""What a model writes into a body of :mod:`bench.real_corpus`: prose, reasoning, content JSON, tool arguments.

Kept apart from the envelopes so the text can grow without the corpus module doing so. The pieces
carry what makes a string slow or special for a JSON reader: quotes and apostrophes, newlines,
tabs, backslashes (Windows paths, regexes), non-ASCII (typographic punctuation, CJK, emoji with
modifiers and joiners), and, in the JSON the model writes, a second level of escapes once that JSON
text is itself a string of the body.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any

import orjson

SENTENCES = (
    "I checked the order history and the package was marked \"delivered\" on Tuesday, but the customer says "
    "it never arrived.",
    "Here's what I'd suggest: ask for the tracking number, then compare it with the carrier's records.",
    "The refund policy says refunds take 5–7 business days; it's been two weeks, so an escalation is fair.",
    "Open C:\\Users\\maria\\Downloads\\invoice_2024.pdf and check whether the total matches the order.",
    'Run `grep -n "timeout" /var/log/app.log` to find the request that failed.',
    "A pattern like \\d{3}-\\d{4} matches the phone number, and \\s+ the spaces around it.",
    "The customer wrote: \"I've been waiting since March — this isn't acceptable.\"",
    "Prices are in € and include VAT; the discount code «SPRING» was applied twice.",
    "Sure! 😊 Let me walk you through it step by step.",
    "Great question 👍🏽 — the short answer is yes, with one caveat.",
    "**Summary:** the issue is a billing mismatch between the invoice and the card statement.",
    "The account was created on 2024-03-14 and the last login was from a new device.",
    "If the item arrived damaged 📦, we can re-ship it or refund it in full.",
    "They said the support agent was polite, but nobody followed up after the first reply.",
    "The shared drive path is \\\\fileserver\\finance\\Q3 and it needs read access.",
    "Set the header to `Content-Type: application/json` and retry the call.",
    "It's not clear whether the \"express\" option was paid for or just selected.",
    "The review mentions the battery (it lasts ~6 h) and the screen's brightness.",
    "Thanks for your patience ❤️ we'll sort this out today.",
    "Our family plan 👨‍👩‍👧 covers up to five devices at no extra cost.",
    "You’re right — the “priority” label wasn’t applied… I’ll fix that now.",
    "The résumé and the naïve café review are both attached (2 files, 1.2 MB).",
    "We’ve escalated it; expect a reply within 24 hours.",
)
CJK_SENTENCES = (
    "订单已经发货，预计三天内送达。",
    "退款申请已提交，请耐心等待。",
    "客服态度很好，但是问题没有解决。",
    "お問い合わせありがとうございます。担当者から折り返しご連絡します。",
    "배송이 지연되어 죄송합니다. 빠르게 처리하겠습니다.",
    "發票金額與訂單不符，需要重新開立。",
)
THINKING = (
    "Okay, so the user is asking about a delayed order and wants to know what to do next.",
    "Hmm, let me think about this. The message mentions a refund, but not an amount.",
    "Wait, maybe I should check whether the \"express\" shipping was actually paid for.",
    "First, I need to figure out the sentiment: the tone is frustrated but polite.",
    "Let me recall the policy: refunds within 30 days, exchanges within 60.",
    "So the risk is low — no legal threat, no chargeback, just a late parcel.",
    "But the user also wrote \"urgent\" twice, which suggests it should be reviewed.",
    "I should answer in JSON with sentiment, score and risk_level, and nothing else.",
    "The path they pasted, C:\\Temp\\order.csv, doesn't matter for the assessment.",
    "Alternatively, the score could be 0.35 instead of 0.4; the difference is small.",
)
WORDS = ("Okay", " so", " the", " order", " arrived", " late", ",", " and", " refund", "\n", " 退款", " 🚚", "'s", '"')
TOPICS = (
    "late delivery",
    "refund",
    "billing",
    '"express" shipping',
    "C:\\Orders\\2024\\march.csv",
    "line one\nline two",
    "tab\tseparated",
    "café",
    "naïve résumé",
    "配送",
    "退款延迟",
    "請求書",
    "😀 happy customer",
    "damaged 📦",
    "customer's tone",
    "price > €50",
    "back\\slash",
    "été",
    "control \x07 bell",
)
TOOL_NAMES = ("get_weather", "search_orders", "create_ticket", "open_file", "send_email")
CITIES = ("Paris", "Oslo", "São Paulo", "Zürich", "東京", "Kraków", "New York")


def length(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    """A log-normal length: most near ``median``, a long tail, clipped to ``[lo, hi]``."""
    return max(lo, min(hi, int(rng.lognormvariate(math.log(median), sigma))))


def prose(rng: random.Random, n_chars: int, cjk_share: float = 0.08) -> str:
    """English prose of about ``n_chars`` characters, with paragraphs, bullets and some CJK sentences."""
    parts: list[str] = []
    size = 0
    while size < n_chars:
        sentence = rng.choice(CJK_SENTENCES) if rng.random() < cjk_share else rng.choice(SENTENCES)
        parts.append(_joint(rng) if parts else "")
        parts.append(sentence)
        size += len(sentence) + 1
    return "".join(parts)


def _joint(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.12:
        return "\n\n"
    if roll < 0.18:
        return "\n- "
    if roll < 0.21:
        return "\n\t"
    return " "


def cjk(rng: random.Random, n_chars: int) -> str:
    """CJK prose (3 bytes a character in UTF-8) with an emoji now and then."""
    parts: list[str] = []
    while sum(map(len, parts)) < n_chars:
        parts.append(rng.choice(CJK_SENTENCES))
        if rng.random() < 0.1:
            parts.append(rng.choice(("🙏", "😀", "✅")))
    return "".join(parts)


def thinking(rng: random.Random, n_chars: int) -> str:
    """A chain of thought of about ``n_chars`` characters, in paragraphs."""
    parts: list[str] = []
    size = 0
    while size < n_chars:
        sentence = rng.choice(THINKING)
        parts.append(("\n\n" if rng.random() < 0.2 else " ") if parts else "")
        parts.append(sentence)
        size += len(sentence) + 1
    return "".join(parts)


def delta(rng: random.Random) -> str:
    """A stream chunk's text: one to three tokens."""
    return "".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))


def payload(rng: random.Random) -> dict[str, Any]:
    """An object the default content schema accepts, with free-text topics that need escaping."""
    out: dict[str, Any] = {
        "sentiment": rng.choice(("positive", "neutral", "negative")),
        "score": _score(rng),
        "risk_level": rng.choice(("low", "medium", "high")),
    }
    if rng.random() < 0.8:
        out["topics"] = [rng.choice(TOPICS) for _ in range(rng.randint(0, 5))]
    if rng.random() < 0.7:
        out["needs_review"] = rng.random() < 0.25
    if rng.random() < 0.3:  # models do not keep the schema's key order
        keys = list(out)
        rng.shuffle(keys)
        out = {k: out[k] for k in keys}
    return out


def _score(rng: random.Random) -> float | int:
    roll = rng.random()
    if roll < 0.05:
        return rng.choice((0, 1))
    if roll < 0.1:
        return rng.choice((0.1 + 0.2, 0.7000000000000001, 1e-05))  # long mantissas, an exponent
    return round(rng.random(), rng.choice((1, 2, 3)))


INVALID: tuple[tuple[str, Callable[[random.Random, dict[str, Any]], Any]], ...] = (
    ("enum", lambda rng, p: p | {"sentiment": rng.choice(("happy", "Positive", "mixed", "négatif"))}),
    ("maximum", lambda rng, p: p | {"score": rng.choice((1.5, 7, 10, 85.0))}),
    ("minimum", lambda rng, p: p | {"score": -0.2}),
    ("additional", lambda rng, p: p | {"explanation": prose(rng, 80)}),
    ("missing", lambda rng, p: _without(p, rng.choice(("sentiment", "score", "risk_level")))),
    ("type", lambda rng, p: p | rng.choice(({"score": "0.8"}, {"needs_review": "yes"}, {"topics": "billing"}))),
    ("items", lambda rng, p: p | {"topics": ["ok", 3, None]}),
    ("not_an_object", lambda rng, p: [p]),
)
"""(what the schema rejects, how the payload is changed): the mistakes models make against a schema."""


def _without(value: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k != key}


def invalid_payload(rng: random.Random) -> tuple[str, Any]:
    """A payload the default content schema rejects, and how."""
    name, change = rng.choice(INVALID)
    return name, change(rng, payload(rng))


def json_text(rng: random.Random, value: Any) -> str:
    """``value`` as a model (or a library after it) writes it: compact, spaced, indented, escaped or not."""
    roll = rng.random()
    if roll < 0.40:
        return orjson.dumps(value).decode()
    if roll < 0.70:
        return json.dumps(value)  # ", " and ": ", every non-ASCII character a \\u escape
    if roll < 0.80:
        return json.dumps(value, ensure_ascii=False)
    if roll < 0.95:
        return json.dumps(value, indent=2, ensure_ascii=False)
    return json.dumps(value, indent=2)


def fenced(rng: random.Random, text: str) -> str:
    """A Markdown code fence around ``text``, with the info strings and spacing models use."""
    info = rng.choice(("json", "json", "JSON", ""))
    tail = rng.choice(("\n```", "\n```\n", "\n```  "))
    return f"```{info}\n{text}{tail}"


def cut(rng: random.Random, text: str) -> str:
    """``text`` cut where ``max_tokens`` ran out: somewhere past its first quarter, never at its end."""
    if len(text) < 4:
        return text[:1]
    return text[: rng.randint(len(text) // 4, len(text) - 2)]


def tool_arguments(rng: random.Random, name: str) -> str:
    """A tool call's ``arguments``: mostly a flat JSON object in a string, now and then not one."""
    roll = rng.random()
    if roll < 0.04:
        return cut(rng, json.dumps(_arguments(rng, name)))  # a fragment, as a stream leaves it
    if roll < 0.06:
        return rng.choice(("", "[]", '["Paris", "Oslo"]', "null", "42", "{'city': 'Paris'}"))
    args = _arguments(rng, name)
    return orjson.dumps(args).decode() if rng.random() < 0.3 else json.dumps(args, ensure_ascii=rng.random() < 0.5)


def _arguments(rng: random.Random, name: str) -> dict[str, Any]:
    if name == "get_weather":
        return {"city": rng.choice(CITIES), "days": rng.randint(1, 14), "metric": rng.random() < 0.7}
    if name == "search_orders":
        return {"customer_id": f"cus_{rng.getrandbits(40):010x}", "status": rng.choice(("open", "late", "any")),
                "limit": rng.choice((10, 50, 100)), "include_archived": rng.random() < 0.2}  # fmt: skip
    if name == "create_ticket":
        return {"title": rng.choice(SENTENCES)[:60], "body": prose(rng, length(rng, 200, 0.6, 20, 1500)),
                "priority": rng.randint(1, 4), "urgent": rng.random() < 0.3}  # fmt: skip
    if name == "open_file":
        path = rng.choice(("C:\\Users\\ana\\Documents\\report \"final\".docx", "/srv/data/été/notes.txt",
                           "D:\\tmp\\a\tb.csv", "\\\\share\\q3\\plan.xlsx"))  # fmt: skip
        return {"path": path, "read_only": rng.random() < 0.8}
    return {"to": "ops@example.com", "subject": rng.choice(TOPICS), "body": prose(rng, length(rng, 160, 0.5, 20, 800))}
