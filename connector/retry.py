"""When to retry an HTTP call and how long to wait: the openai-python policy, made explicit.

Retried: 408, 409, 429, every 5xx, connection/read errors and timeouts. Not retried: any other 4xx
(a bad request stays bad). The wait is ``min(base·2^(n-1), cap)`` shrunk by up to ``jitter``, unless
the server sent ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms`` within the allowed maximum.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

RETRYABLE_4XX = frozenset({408, 409, 429})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Attempt cap and backoff shape."""

    max_attempts: int = 4
    base_s: float = 0.5
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 60.0
    jitter: float = 0.25

    def should_retry_status(self, status: int) -> bool:
        """True for statuses a later attempt may fix."""
        return status in RETRYABLE_4XX or status >= 500

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Exponential backoff after failed attempt number ``attempt`` (1-based), with jitter."""
        raw = min(self.base_s * 2.0 ** (attempt - 1), self.max_backoff_s)
        return raw * (1 - self.jitter * rng.random())

    def delay(self, attempt: int, headers: Mapping[str, str] | None, rng: random.Random) -> float:
        """Seconds to wait before the next attempt: the server's hint when usable, else backoff."""
        hint = retry_after_s(headers or {}, now=time.time())
        if hint is not None and 0 <= hint <= self.max_retry_after_s:
            return hint
        return self.backoff(attempt, rng)


def retry_after_s(headers: Mapping[str, str], now: float) -> float | None:
    """Parse ``retry-after-ms`` or ``Retry-After`` (delta seconds or HTTP date); None when absent/bad."""
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value.strip() else None
    return None if parsed is None else max(0.0, parsed.timestamp() - now)
