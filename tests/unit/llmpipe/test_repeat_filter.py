"""librdkafka's retry lines collapse to one per change of state."""

from __future__ import annotations

import logging

from llmpipe.kafka_io import RepeatFilter


def _record(text: str) -> logging.LogRecord:
    return logging.LogRecord("librdkafka", logging.ERROR, __file__, 1, "%s", (text,), None)


def test_repeats_are_held_back_and_counted_once_a_window() -> None:
    now = [0.0]
    kept = RepeatFilter(window_s=60, clock=lambda: now[0])
    refused = "Connect to ipv4#127.0.0.1:{} failed: Connection refused (after {}ms in state CONNECT)"
    shown = []
    for i in range(1000):
        now[0] = i * 0.1  # 100 s of retries every 100 ms
        record = _record(refused.format(9092, i % 7))
        if kept.filter(record):
            shown.append(record.getMessage())
    assert len(shown) == 2
    assert shown[1].endswith("(the same 599 more times in 60s)")
    now[0] += 1
    assert kept.filter(_record("Broker up"))
    assert kept.filter(_record(refused.format(9092, 1)))  # a new state is shown at once
