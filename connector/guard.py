"""Transactional calls that are given up when they block past their time, told apart from an outage.

librdkafka's transactional calls can block for good after a broker restart (see
:class:`llmpipe.kafka_io.CallThread`). The connector runs each transaction on a call thread and waits
for it in slices: while Kafka does not answer, it waits (the call waits for the broker, and so would
any retry); once Kafka answers again, a call of a producer that lived through the outage gets a short
grace, any other call a longer bound, and is then given up: the caller replaces the producer, whose
new epoch fences whatever the stuck one might still send.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent import futures
from typing import TypeVar

from llmpipe import kafka_io
from llmpipe.kafka_io import Reachability

T = TypeVar("T")

CALL_POLL_S = 0.25
"""The slices in which a call is waited for."""

RETURN_GRACE_S = 3.0
"""How long a call of a producer that lived through an outage may still block once Kafka answers."""

CALL_BOUND_S = 60.0
"""How long any other call may block while Kafka answers (two of librdkafka's 30 s timeouts)."""


class GuardedCalls:
    """Runs one producer's transactional calls on a call thread, giving up on those that block past their time."""

    def __init__(self, watch: Reachability, bound_s: float = CALL_BOUND_S) -> None:
        self.watch = watch
        self.bound_s = bound_s
        self.producer_made_at = float("-inf")
        """When the current producer was made (``time.monotonic()``)."""
        self._calls = kafka_io.CallThread("txn")

    def producer_is_stale(self) -> bool:
        """The producer lived through an outage: its coordinator lookups may point at a dead handle."""
        return self.watch.last_down_at > self.producer_made_at

    def make(self, factory: Callable[[], T]) -> T:
        """Make a producer (``init_transactions``) under the guard, and note when."""
        made = self.run(factory, "init_transactions", fresh=True)
        self.producer_made_at = time.monotonic()
        return made

    def run(self, fn: Callable[[], T], action: str, *, fresh: bool = False) -> T:
        """``fn()`` on the call thread; ``TxnTimedOut`` when it is given up (the producer must be replaced)."""
        started = time.monotonic()
        future = self._calls.submit(fn)
        while not future.done():
            futures.wait([future], timeout=CALL_POLL_S)
            if not future.done() and self._overdue(started, fresh=fresh):
                self._calls.abandon()
                msg = f"{action} still blocked after {time.monotonic() - started:.0f}s: given up"
                raise kafka_io.TxnTimedOut(msg)
        return future.result()

    def _overdue(self, started: float, *, fresh: bool) -> bool:
        watch, now = self.watch, time.monotonic()
        if watch.down_since is not None:
            return False
        answered_for = min(now - started, watch.answering_for(now))
        stale = not fresh and self.producer_is_stale()
        return answered_for >= (RETURN_GRACE_S if stale else self.bound_s)

    def close(self) -> None:
        """Let the call thread end."""
        self._calls.shutdown()
