"""A deterministic, realistic prompt set: users with skewed activity, A/B arms, two models, a few bad lines.

Generated rather than committed so the repository stays small; the same seed gives the same file
byte for byte, so two demo runs send the same requests.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

MODELS = (("llmpipe/sim-8b", 0.7), ("llmpipe/sim-70b", 0.3))
ARMS = ("control", "treatment")
TENANTS = ("acme", "globex", "initech", "umbrella")

_SYSTEM = "You review customer messages. Answer with a JSON assessment of sentiment, score and risk."
_TEMPLATES = (
    "My order {order} arrived {state}. {tail}",
    "Can you summarise this ticket for me? Customer says the {thing} is {state} since {when}.",
    "I was charged twice for order {order}. {tail}",
    "What's the weather going to be like in {city} {when}? I need to plan the delivery.",
    "Please classify: 'The {thing} works {state}, {tail}'",
    "Translate to a polite reply: the {thing} we shipped {when} was {state}.",
    "Extract the order id and the complaint from: order {order}, {thing} {state}. {tail}",
)
_WORDS: dict[str, tuple[str, ...]] = {
    "state": ("damaged", "late", "fine", "broken", "perfect", "missing parts", "as described"),
    "tail": ("I want a refund.", "Thanks a lot!", "This is the third time.", "Please call me back.",
             "Not happy at all.", "Great service as always.", "Who do I talk to?"),
    "thing": ("router", "laptop", "subscription", "blender", "app", "invoice", "headset"),
    "when": ("yesterday", "last week", "tomorrow", "this morning", "two days ago"),
    "city": ("Oslo", "Lisbon", "Osaka", "Austin", "Nairobi", "Lyon"),
}


@dataclass(frozen=True)
class PromptSet:
    """How many requests, how many users, and what share of input lines are broken on purpose."""

    requests: int = 6000
    users: int = 500
    bad_share: float = 0.002
    seed: int = 7


def arm_of(user_id: str) -> str:
    """Stable A/B assignment by user (a hash, as an experiment service would do)."""
    return ARMS[hashlib.sha256(user_id.encode()).digest()[0] % len(ARMS)]


def tenant_of(user_id: str) -> str:
    """Each user belongs to one tenant."""
    return TENANTS[hashlib.sha256(user_id.encode()).digest()[1] % len(TENANTS)]


def _text(rng: random.Random) -> str:
    template = rng.choice(_TEMPLATES)
    fill = {name: rng.choice(options) for name, options in _WORDS.items()}
    return template.format(order=f"#{rng.randint(10000, 99999)}", **fill)


def _request(i: int, rng: random.Random, user_weights: list[float], spec: PromptSet) -> dict[str, Any]:
    user = f"u{rng.choices(range(spec.users), weights=user_weights)[0]:04d}"
    model = rng.choices([m for m, _ in MODELS], weights=[w for _, w in MODELS])[0]
    messages = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _text(rng)}]
    if rng.random() < 0.2:  # follow-up turns make prompts of varied length
        messages += [{"role": "assistant", "content": "Could you give me more detail?"},
                     {"role": "user", "content": _text(rng)}]
    params: dict[str, Any] = {"temperature": round(rng.uniform(0, 1), 2)}
    if rng.random() < 0.1:
        params["max_tokens"] = rng.choice((8, 16, 32))  # some completions stop on length
    attributes = {"user_id": user, "arm": arm_of(user), "tenant": tenant_of(user)}
    return {"request_id": f"demo-{i:06d}", "model": model, "messages": messages, "params": params,
            "attributes": attributes}


def _broken(i: int, rng: random.Random) -> bytes:
    """Input lines a real feed also contains: no messages, a non-object, a line that is not JSON."""
    kind = rng.randrange(3)
    if kind == 0:
        return orjson.dumps({"request_id": f"demo-{i:06d}", "messages": []})
    if kind == 1:
        return orjson.dumps([f"demo-{i:06d}", "not an object"])
    return f'{{"request_id": "demo-{i:06d}", "messages": [{{"role": "user"'.encode()


def lines(spec: PromptSet) -> Iterator[bytes]:
    """The JSONL lines of the prompt set, in order."""
    rng = random.Random(spec.seed)
    user_weights = [1 / (rank + 1) ** 1.1 for rank in range(spec.users)]  # Zipf-like: a few heavy users
    for i in range(spec.requests):
        if rng.random() < spec.bad_share:
            yield _broken(i, rng)
        else:
            yield orjson.dumps(_request(i, rng, user_weights, spec))


def write(spec: PromptSet, path: Path) -> int:
    """Write the prompt set to ``path``; return the number of lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("wb") as out:
        for line in lines(spec):
            out.write(line + b"\n")
            count += 1
    return count
