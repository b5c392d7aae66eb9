"""The consumer and its partitions: rebalances, and which outputs follow the raw record's partition.

Partitions can move between workers (a member joins, leaves or crashes) and topics can grow; both
arrive as callbacks inside a consume call, where no other call on the client may be made. So the
callbacks only forget what must be forgotten and note what must be checked, and the collect loop
does the checking after the consume call.
"""

from __future__ import annotations

import logging

from gpu_stage.worker.calls import GuardedCalls
from llmpipe.errors import SourceError
from llmpipe.kafka_io import Consumer, PackedReader, TopicPartitions

log = logging.getLogger(__package__)  # the worker's one logger, "gpu_stage.worker"


class Partitioning(GuardedCalls):
    """The consumer with its rebalance callbacks, and the output partitioning that follows the assignment."""

    def _new_consumer(self) -> Consumer | PackedReader:
        s = self.settings
        member = PackedReader if s.kafka_reader == "packed" else Consumer
        return member(
            s.kafka,
            s.group_id,
            [s.raw_topic],
            # A short session lets a restarted worker get the partitions of a crashed one within seconds.
            config={
                "max.poll.interval.ms": 300_000,
                "fetch.max.bytes": 64 << 20,
                "session.timeout.ms": 10_000,
                **dict(s.consumer_config),
            },
            on_revoke=self._on_revoke,
            on_assign=self._on_assign,
            fetch_backoff_ms=s.fetch_backoff_ms,
        )

    def _on_assign(self, parts: TopicPartitions) -> None:
        """Have the partition counts checked again: partitions added to a topic start a rebalance.

        Runs inside the consume call, where no other call on the client may be made (confluent-kafka
        aborts the process), so the check waits for :meth:`_recheck_partitioning`.
        """
        del parts
        self._partitioning_stale = True

    def _recheck_partitioning(self) -> None:
        """After a rebalance, check which outputs are co-partitioned, before any record is produced.

        A broker that does not answer leaves the last decision in place (a record sent to a partition
        its topic lacks then fails its transaction loudly).
        """
        self._partitioning_stale = False
        try:
            self._co_partitioned = self._outputs_co_partitioned()
        except SourceError as exc:
            log.warning("rebalance: partition counts unknown, output partitioning left as it was: %s", exc)

    def _outputs_co_partitioned(self) -> frozenset[str]:
        """The output topics whose records go to their raw record's partition number (``--partition-by source``).

        Only a topic with as many partitions as the raw topic qualifies: there, a record whose raw
        record was placed by its key lands where its key would place it anyway, and each transaction
        touches only this worker's partitions. With every worker writing to every partition instead,
        a committed record stays invisible to ``read_committed`` readers until every transaction that
        other workers opened earlier on its partition has ended, and every commit writes a marker to
        every partition.
        """
        s = self.settings
        if s.partition_by != "source":
            return frozenset()
        raw = self.consumer.partition_count(s.raw_topic)
        counts = {topic: self.consumer.partition_count(topic) for topic in (self.typed_topic, s.dlq_topic)}
        same = frozenset(topic for topic, count in counts.items() if raw is not None and count == raw)
        if same != getattr(self, "_co_partitioned", None):
            log.info("records go to their raw record's partition in %s; by key in %s (partitions: %s has %s, %s)",
                     sorted(same) or "none", sorted(set(counts) - same) or "none", s.raw_topic, raw,
                     ", ".join(f"{topic} has {count}" for topic, count in counts.items()))  # fmt: skip
        return same

    def _on_revoke(self, parts: TopicPartitions) -> None:
        """Forget buffered records of revoked partitions; their new owner reads them from the commit.

        A commit in flight ends first, so the partitions move on with their offsets decided (its
        outcome, failure included, is handled by the loop after the consume call). One blocked past
        its time is left to the loop, which gives it up (``_settle``).
        """
        if self._in_flight is not None:
            self._await_done(self._in_flight.committed, self._in_flight.handed_at)
        revoked = {(tp.topic, tp.partition) for tp in parts}
        self._buffer = self._buffer.without(revoked)
