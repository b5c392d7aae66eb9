"""The transactional producer: made with the worker's settings, reset after a failure, replaced when stale.

Replacing the producer is the worker's answer to every transaction whose outcome it cannot know (an
abort that failed, a call given up, a producer that lived through an outage): the new producer's
``init_transactions`` bumps the epoch of the transactional id, which ends the old transaction at the
coordinator and fences anything the old producer still sends.
"""

from __future__ import annotations

import logging
import time

from gpu_stage.worker.calls import GuardedCalls
from gpu_stage.worker.state import TxnProducer
from llmpipe.errors import FencedError, PipelineError
from llmpipe.kafka_io import PackedWriter, TransactionalProducer, TxnTimedOut

log = logging.getLogger(__package__)  # the worker's one logger, "gpu_stage.worker"

MAX_MESSAGE_BYTES = 64 << 20
"""Largest typed or DLQ record the worker writes. librdkafka's default (1,000,000) is below the
1 MiB body limit, so a body just under that limit would otherwise fail every retry as a poison pill;
the typed and DLQ topics are created with the same ``max.message.bytes``."""


class ProducerLifecycle(GuardedCalls):
    """Making, resetting and replacing the worker's transactional producer."""

    def _new_producer(self) -> TxnProducer:
        kind = PackedWriter if self.settings.kafka_writer == "packed" else TransactionalProducer
        return kind(
            self.settings.kafka,
            self.settings.transactional_id,
            config={
                "linger.ms": 50,
                "queue.buffering.max.messages": 1_000_000,
                "queue.buffering.max.kbytes": 1 << 20,
                "batch.size": 1 << 20,
                "message.max.bytes": MAX_MESSAGE_BYTES,
                **dict(self.settings.producer_config),
            },
            retry_backoff_ms=self.settings.txn_retry_backoff_ms,
        )

    def _reset_producer(self, *, recreate: bool) -> None:
        """Abort the open transaction; replace the producer instead when asked or when the abort fails."""
        if not recreate:
            try:
                self._call(self.producer.abort, "abort_transaction")
                return
            except FencedError:
                raise
            except PipelineError as exc:  # outcome unknown: a new epoch settles it
                log.debug("abort failed, replacing the producer: %s", exc)
        self._replace_producer()

    def _replace_producer(self) -> None:
        """A new producer for the transactional id: its epoch fences every request of the old one."""
        self.producer = self._call(self._new_producer, "init_transactions", fresh=True)
        self._producer_made_at = time.monotonic()

    def _refresh_stale_producer(self) -> None:
        """Replace a producer that lived through an outage before it begins a transaction.

        Its coordinator lookups may point at the restarted broker's old handle, on which its next
        ``send_offsets_to_transaction`` would block for good (see :class:`~llmpipe.kafka_io.CallThread`).
        """
        if self._watch.last_down_at <= self._producer_made_at:
            return
        log.info("Kafka was unreachable since the transactional producer was made: replacing it")
        try:
            self._replace_producer()
        except FencedError:
            raise
        except PipelineError as exc:
            msg = f"cannot replace the transactional producer: {exc}"
            raise TxnTimedOut(msg) from exc
