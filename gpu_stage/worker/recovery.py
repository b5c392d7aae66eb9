"""Recovering from a failed transaction: abort it (or replace the producer), rewind, retry while Kafka is away.

A broker outage is ridden out, not exited on: every step that needs Kafka is retried with backoff
until it answers again, and the loop then goes on where the last commit left it. Only fencing (a
newer instance owns the transactional id) ends the process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from gpu_stage import metrics
from gpu_stage.worker.producer import ProducerLifecycle
from llmpipe.errors import FencedError, PipelineError
from llmpipe.kafka_io import TxnAbortable, TxnTimedOut

T = TypeVar("T")

RECOVERY_BACKOFF_S = (0.5, 5.0)
"""The first and the longest pause between attempts to make the producer usable and rewind while
Kafka does not answer; the pause doubles from one attempt to the next."""


class Recovery(ProducerLifecycle):
    """Turns a failed transaction into a rewind: its batch, and whatever was collected since, is read again."""

    def _or_recover(self, step: Callable[[], T]) -> T | None:
        """``step``'s result; None when its transaction failed and we recovered (see ``_recover``)."""
        try:
            return step()
        except TxnAbortable as exc:
            self._recover("abortable", exc, recreate=False)
        except TxnTimedOut as exc:
            self._recover("timeout", exc, recreate=True)
        return None

    def _recover(self, cause: str, exc: Exception, *, recreate: bool) -> None:
        """Abort (or replace the producer), then rewind so the batch is read again.

        While Kafka does not answer, both steps fail: they are retried with backoff until it does
        (or the worker is stopped), a replaced producer each time; only fencing ends the process.
        The order matters: the new producer's epoch ends the old transaction at the coordinator
        (commits what was decided, aborts the rest) before the rewind reads the committed offsets.
        """
        self._outage.failed(cause, exc)
        metrics.ABORTS.labels(cause).inc()
        self.totals.aborts += 1
        self._buffer = self._new_buffer()
        self._notice_outage()
        pause, producer_ready = RECOVERY_BACKOFF_S[0], False
        while not self.stopping:
            try:
                if not producer_ready:
                    self._reset_producer(recreate=recreate)
                    producer_ready = True
                self.consumer.rewind_to_committed()
                return
            except FencedError:
                raise
            except PipelineError as failure:  # Kafka does not answer (SourceError, TxnTimedOut, …)
                self._outage.unreachable(failure)
                recreate = True
                time.sleep(pause)
                pause = min(2 * pause, RECOVERY_BACKOFF_S[1])
