from __future__ import annotations

import random

import pytest

from connector.retry import RetryPolicy, retry_after_s


@pytest.mark.parametrize(
    ("status", "retry"),
    [
        (400, False),
        (401, False),
        (404, False),
        (422, False),
        (408, True),
        (409, True),
        (429, True),
        (500, True),
        (503, True),
    ],
)
def test_retryable_statuses(status: int, retry: bool) -> None:
    assert RetryPolicy().should_retry_status(status) is retry


def test_backoff_doubles_with_cap_and_jitter() -> None:
    policy = RetryPolicy(base_s=0.5, max_backoff_s=4.0, jitter=0.25)
    rng = random.Random(0)
    for attempt, nominal in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 4.0), (9, 4.0)]:
        for _ in range(50):
            value = policy.backoff(attempt, rng)
            assert nominal * 0.75 <= value <= nominal


def test_retry_after_seconds_date_and_ms() -> None:
    assert retry_after_s({"Retry-After": "3"}, now=0) == 3.0
    assert retry_after_s({"retry-after-ms": "1500", "Retry-After": "9"}, now=0) == 1.5
    # 'Sun, 06 Nov 1994 08:49:37 GMT' is epoch 784111777
    assert retry_after_s({"Retry-After": "Sun, 06 Nov 1994 08:49:37 GMT"}, now=784111770) == 7.0
    assert retry_after_s({}, now=0) is None


def test_delay_prefers_hint_within_limit() -> None:
    policy = RetryPolicy(max_retry_after_s=10, base_s=0.5, jitter=0)
    rng = random.Random(1)
    assert policy.delay(1, {"Retry-After": "2"}, rng) == 2.0
    assert policy.delay(1, {"Retry-After": "600"}, rng) == 0.5  # too long: fall back to backoff
    assert policy.delay(3, None, rng) == 2.0
