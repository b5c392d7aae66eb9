"""Gathering a batch: consume until its record count, byte count or wait time closes it.

A batch is the unit of one transaction, so its size trades latency against the per-transaction cost
(a commit is a broker round trip plus a marker per partition). While the previous batch still
commits, the next one stays open: its transaction could not begin anyway.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import cast

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.batch import RawBatch
from gpu_stage.transform.packed import PackedBatch
from gpu_stage.worker.partitions import Partitioning
from gpu_stage.worker.state import Consumed
from llmpipe import threads
from llmpipe.kafka_io import Message, PackedRecords, Records, TopicPartitions, offsets

U8 = npt.NDArray[np.uint8]

CONSUME_MAX_RECORDS = 10_000
"""The most records one consume call of the collect loop asks for."""


COMMIT_POLL_S = 0.002
"""How long one consume call may wait while a batch stays open for the commit in flight: the
granularity at which the loop notices that commit's end."""


class Collecting(Partitioning):
    """The collect step: one batch of records from the partitions the worker still owns."""

    def _collect(self) -> Consumed:
        """Gather one batch, closed by record count, byte count or wait time.

        While the previous batch still commits, the batch stays open past its wait time: the loop
        could not begin its transaction anyway, and records that arrive meanwhile would otherwise
        wait for a whole further cycle.
        """
        s = self.settings
        deadline = time.monotonic() + s.batch_wait_ms / 1000
        buffer = self._buffer
        self._starved_s = 0.0
        while len(buffer) < s.batch_records and buffer.nbytes < s.batch_bytes and not self.stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if not self._committing():
                    break
                remaining = COMMIT_POLL_S
            asked = min(CONSUME_MAX_RECORDS, s.batch_records - len(buffer))
            called = time.perf_counter()
            got = self.consumer.consume_records(asked, remaining)
            if len(got) < asked:  # it waited out its timeout (or a rebalance cut it short)
                self._starved_s += time.perf_counter() - called
            if got and self.totals.first_input_at is None:
                self.totals.first_input_at = time.time()
                self.totals.cpu_at_first_input = time.process_time()
                self.totals.threads_at_first_input = threads.cpu_by_group()
            buffer = self._buffer  # a rebalance during consume may have replaced it
            buffer.extend(got)  # type: ignore[arg-type]  # the consumer fills buffers of its own kind
            if self._partitioning_stale:
                self._recheck_partitioning()
        batch, self._buffer = self._buffer, self._new_buffer()
        return self._owned(batch)

    def _committing(self) -> bool:
        """A commit is in flight and has not ended yet (nor blocked past its time: see ``_overdue``)."""
        in_flight = self._in_flight
        return in_flight is not None and not in_flight.committed.done() and not self._overdue(in_flight.handed_at)

    def _owned(self, batch: Consumed) -> Consumed:
        """``batch`` without records of partitions no longer assigned to us.

        A rebalance callback runs inside ``consume``; records a consume call returned together with a
        revocation must not be processed, or their offsets would be committed next to the new owner's.
        """
        seen = batch.partitions_seen()
        if not seen:
            return batch
        owned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        return batch if seen <= owned else batch.without(seen - owned)


def to_batch(records: Consumed | list[Message], allocate: Callable[[int], U8] | None = None) -> RawBatch | PackedBatch:
    """Columnar batch of consumed records (a missing value counts as an empty body); packed ones stay packed.

    Packed records are joined into one buffer from ``allocate`` (the backend's ``input_buffer``) when
    given: each record is copied once, into memory the backend reads in place.
    """
    if isinstance(records, PackedRecords):
        return PackedBatch.joined(records.topic, [part.columns() for part in records.parts], allocate)
    if not isinstance(records, Records):
        records = Records.of_messages(records)
    values = records.values
    topics = set(records.topics)
    return RawBatch(
        values=[v or b"" for v in values] if None in values else cast("list[bytes]", values),
        keys=records.keys,
        headers=records.headers,
        topic=topics.pop() if len(topics) == 1 else ",".join(sorted(topics)),
        partitions=records.partitions,
        offsets=records.offsets,
        timestamps_ms=records.timestamps_ms,
    )


def next_offsets(messages: list[Message]) -> TopicPartitions:
    """Per partition, the offset after the last record of the batch (what the transaction commits)."""
    last: dict[tuple[str, int], int] = defaultdict(lambda: -1)
    for m in messages:
        key = (m.topic, m.partition)
        last[key] = max(last[key], m.offset)
    return offsets((topic, part, off + 1) for (topic, part), off in last.items())
