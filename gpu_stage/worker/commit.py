"""The transaction step: one Kafka transaction per batch, carrying its typed rows, dead letters and offsets.

The consumed offsets are added to the transaction (``send_offsets_to_transaction``), so after a crash
at any point the committed view holds each raw record exactly once in typed + DLQ. Adding them (two
round trips, to the transaction and the group coordinators) and the commit itself
(``commit_transaction``: waiting for the records' delivery and the broker's end of the transaction)
run on the committer thread while the loop collects the next batch; the next transaction begins
only once both are done. The offsets are taken on the loop's thread when the batch is handed over,
so the committer only completes what is already decided. When either call fails, the batch
collected meanwhile is dropped and the consumer rewinds to the committed offsets: both batches are
read again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu_stage import metrics
from gpu_stage.transform.api import StreamBackend
from gpu_stage.transform.batch import RawBatch
from gpu_stage.transform.packed import PackedBatch
from gpu_stage.worker.batches import to_batch
from gpu_stage.worker.chunks import ChunkedParse, Parsing
from gpu_stage.worker.policy import check_bad
from gpu_stage.worker.recovery import Recovery
from gpu_stage.worker.report import Reporting
from gpu_stage.worker.state import CommitEnd, Consumed, InFlight, Outcome, TxnProducer
from gpu_stage.worker.totals import STAGES
from llmpipe.errors import ParseError
from llmpipe.kafka_io import ANY_PARTITION, TopicPartitions, offsets


class Committing(Recovery, ChunkedParse, Reporting):
    """Runs a batch's transaction up to its commit, and settles the commit in flight."""

    def _parse_ahead(self, records: Consumed) -> Parsing | None:
        """Begin parsing the collected batch while the previous one still commits; None when none does.

        Only producing needs the batch's own transaction, which cannot begin before that commit
        ends: the parse of its first chunk need not wait (when the commit fails, the parse is
        dropped with the batch). Starts the batch's steps, since the parse thread counts into them.
        """
        self._steps = dict.fromkeys(STAGES, 0.0)
        if not records or self._in_flight is None:
            return None
        return self._begin_parse(to_batch(records, self._allocator()))

    def _allocator(self) -> Callable[[int], npt.NDArray[np.uint8]] | None:
        """The backend's input buffers, where it reads a batch in place."""
        return self.backend.input_buffer if isinstance(self.backend, StreamBackend) else None

    def _process(self, records: Consumed, parsing: Parsing | None = None) -> None:
        """Run the batch's transaction up to its commit, which goes on on the committer thread."""
        started = time.time()
        self._steps["collect"] = self._collect_s
        self._steps["starved"] = self._starved_s
        self._watchdog.arm()
        batch = parsing.batch if parsing is not None else to_batch(records, self._allocator())
        self._in_flight = self._or_recover(lambda: self._transact(records, batch, started, parsing))
        if self._in_flight is not None and not self.settings.commit_overlap:
            self._settle()

    def _settle(self) -> bool:
        """Wait for the commit in flight, if any; account for it, or recover when it failed.

        Returns False when it failed: the consumer is rewound to the committed offsets, so whatever
        was collected since must be dropped (it is read again).
        """
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None:
            return True
        waited = time.perf_counter()
        ended = self._or_recover(lambda: self._wait_for(in_flight.committed, "commit_transaction", in_flight.handed_at))
        if ended is None:
            return False
        in_flight.steps["wait"] = time.perf_counter() - waited
        self._account(in_flight, ended.at, ended.cpu)
        self._outage.recovered(ended.monotonic)
        self._watchdog.disarm()
        return True

    def _transact(self, records: Consumed, batch: RawBatch | PackedBatch, started: float,
                  parsing: Parsing | None) -> InFlight:  # fmt: skip
        """Parse and produce one batch and hand its offsets and commit to the committer thread."""
        try:
            self._refresh_stale_producer()
            outcome = self._transact_unguarded(batch, parsing)
        except BaseException:
            if parsing is not None:
                parsing.stop()  # failed before its parse was waited for: nothing runs on
            raise
        steps, producer = self._steps, self.producer
        # Taken here, on the loop's thread: the consumer is this thread's alone (its calls are not
        # made while another runs), and its position is the batch's end only until the next collect.
        commit_offsets, group = self._commit_offsets(records), self.consumer.group_metadata()
        committed = self._calls.submit(lambda: self._commit(producer, steps, commit_offsets, group))
        return InFlight(records, outcome, started, steps, committed)

    @staticmethod
    def _commit(producer: TxnProducer, steps: dict[str, float], commit_offsets: TopicPartitions,
                group: Any) -> CommitEnd:  # fmt: skip
        """The committer thread's part: add the batch's offsets to the transaction, then commit it.

        Both are round trips to the coordinators; here they overlap the next batch's collection
        instead of holding up the loop.
        """
        started = time.perf_counter()
        producer.send_offsets(commit_offsets, group)
        producer.commit()
        steps["commit"] += time.perf_counter() - started
        metrics.COMMIT_SECONDS.observe(steps["commit"])
        return CommitEnd(time.time(), time.process_time(), time.monotonic())

    def _transact_unguarded(self, batch: RawBatch | PackedBatch, parsing: Parsing | None) -> Outcome:
        """Begin the transaction, parse and produce the batch, and produce its dead letters."""
        producer = self.producer
        producer.begin()
        try:
            outcome = self._parse_and_produce(batch, parsing)
            check_bad(outcome.bad, len(batch), self.settings)
        except ParseError:
            producer.abort()  # rows of earlier chunks are in the transaction: they never become visible
            raise
        produce_started = time.perf_counter()
        dlq = self.settings.dlq_topic
        by_source = dlq in self._co_partitioned
        for bad in outcome.bad:
            partition = bad.partition if by_source and bad.partition is not None else ANY_PARTITION
            producer.produce(dlq, bad.raw, bad.key, bad.headers(), partition)
        self._steps["produce"] += time.perf_counter() - produce_started
        return outcome

    def _commit_offsets(self, records: Consumed) -> TopicPartitions:
        """Offsets after the batch; the consumer's position where it is further on.

        The position has also stepped over transaction markers that follow the last record (the raw
        topic is written in transactions), so the committed offset reaches the end of the partition.
        Everything below the position was consumed into this batch: the buffer is empty by now.
        """
        ahead = {(tp.topic, tp.partition): tp.offset for tp in self.consumer.positions() if tp.offset >= 0}
        return offsets(
            (topic, part, max(after, ahead.get((topic, part), -1)))
            for (topic, part), after in records.next_offsets().items()
        )
