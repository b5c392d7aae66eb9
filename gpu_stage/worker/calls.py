"""Transactional calls that cannot block the worker for good: run on the committer thread, waited for in slices.

librdkafka can block in a transactional call past its timeout: after a broker restart
``send_offsets_to_transaction`` can stay blocked on the restarted broker's old handle for good. So
each call runs on the committer thread (:class:`~llmpipe.kafka_io.CallThread`) and the loop waits
for it in slices of ``CALL_POLL_S``, noticing an outage meanwhile. A call that still blocks
``RETURN_GRACE_S`` after a :class:`~llmpipe.kafka_io.ClusterWatch` saw Kafka answer again, or one
that blocks the call bound while it answers, is given up (``TxnTimedOut``): the recovery then
replaces its producer, whose new epoch fences whatever the old one still sends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent import futures
from typing import TypeVar

from gpu_stage.worker.state import WorkerState
from llmpipe.kafka_io import TxnTimedOut

T = TypeVar("T")

CALL_POLL_S = 0.25
"""The slices in which a transactional call on the committer thread is waited for: the granularity at
which a call blocked past its time is noticed."""


RETURN_GRACE_S = 3.0
"""How long a transactional call of a producer that lived through an outage may still block once
Kafka answers again before it is given up and the producer replaced. A call that was only waiting for
the broker ends within about a second of its return; one stuck on the restarted broker's old handle
(confluentinc/librdkafka#5511) never does."""


CALL_BOUND_S = 60.0
"""How long a transactional call may block while Kafka answers (two of librdkafka's 30 s timeouts,
and at most half of ``--txn-deadline``) before it is given up and the producer replaced."""


def call_bound_s(txn_deadline_s: float) -> float:
    """The call bound of a worker with ``--txn-deadline`` ``txn_deadline_s`` (see ``CALL_BOUND_S``)."""
    return max(2 * RETURN_GRACE_S, min(CALL_BOUND_S, txn_deadline_s / 2))


class GuardedCalls(WorkerState):
    """The worker's transactional calls, given up when they block past their time."""

    def _notice_outage(self) -> None:
        """Say once that Kafka does not answer, as soon as the cluster watch sees it."""
        down_since = self._watch.down_since
        if down_since is not None and not self._outage.said_unreachable:
            self._outage.unreachable(f"no answer for {time.monotonic() - down_since:.0f}s", down_since)

    def _call(self, fn: Callable[[], T], action: str, *, fresh: bool = False) -> T:
        """``fn()`` on the committer thread, given up when it blocks past its time (see ``_overdue``).

        ``fresh``: the call makes a new producer, so the current one's past does not matter.
        """
        return self._wait_for(self._calls.submit(fn), action, time.monotonic(), fresh=fresh)

    def _wait_for(self, future: futures.Future[T], action: str, started: float, *, fresh: bool = False) -> T:
        """The result of a call begun at ``started``; ``TxnTimedOut`` when it is given up."""
        if not self._await_done(future, started, fresh=fresh):
            self._calls.abandon()
            msg = f"{action} still blocked after {time.monotonic() - started:.0f}s: given up, replacing the producer"
            raise TxnTimedOut(msg)
        return future.result()

    def _await_done(self, future: futures.Future[T], started: float, *, fresh: bool = False) -> bool:
        """Wait until a call begun at ``started`` ends (True), is overdue, or is left for a stop (False).

        A worker told to stop while Kafka does not answer leaves the call: nothing of its
        transaction is committed unless the coordinator had it already, and the restart fences it.
        """
        while not future.done():
            futures.wait([future], timeout=CALL_POLL_S)
            self._notice_outage()
            if future.done():
                break
            if self._overdue(started, fresh=fresh) or (self.stopping and self._watch.down_since is not None):
                return False
        return True

    def _overdue(self, started: float, *, fresh: bool = False) -> bool:
        """A transactional call begun at ``started`` has blocked for longer than it can legitimately take.

        Never while Kafka does not answer: the call waits for the broker, and so would any retry.
        Once it answers, a call of a producer that lived through the outage gets ``RETURN_GRACE_S``
        from the later of its start and Kafka's return; any other call (``fresh``: one that makes a
        new producer) gets the call bound.
        """
        watch, now = self._watch, time.monotonic()
        if watch.down_since is not None:
            return False
        answered_for = min(now - started, watch.answering_for(now))
        stale = not fresh and watch.last_down_at > self._producer_made_at
        return answered_for >= (RETURN_GRACE_S if stale else self._call_bound_s)
