"""Per-request randomness derived from the seed and the request, never from arrival order.

Two requests with the same key get the same answer whichever arrives first, and a retried request
gets the same body as its first attempt (only the fault draw depends on the attempt number).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import orjson

_IGNORED_FOR_KEY = ("stream", "stream_options")


def request_key(header_id: str | None, payload: dict[str, Any]) -> str:
    """The X-Request-Id header when sent, else a digest of the request without its streaming flags.

    Dropping ``stream``/``stream_options`` makes a streamed and a unary call of the same request
    produce the same completion, which is what the reassembly tests compare.
    """
    if header_id:
        return header_id
    core = {k: v for k, v in payload.items() if k not in _IGNORED_FOR_KEY}
    return hashlib.blake2b(orjson.dumps(core, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()


def rng_for(seed: int, key: str, salt: str) -> random.Random:
    """A generator seeded by (seed, salt, key) through a hash, so nearby seeds are unrelated."""
    digest = hashlib.blake2b(f"{seed}\x00{salt}\x00{key}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def hex_id(rng: random.Random, length: int = 32) -> str:
    """Lower-case hex like ``uuid4().hex`` (vLLM's id suffix), drawn from ``rng``."""
    return f"{rng.getrandbits(length * 4):0{length}x}"
