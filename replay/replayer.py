"""The replay loop: DLQ records in, source-topic records out, progress in the same Kafka transaction.

Progress is this replay's consumer-group offset on the DLQ, sent with ``send_offsets_to_transaction``:
the re-driven records and the new offset commit together or not at all. A replay killed midway aborts
(or never commits) its open transaction, and the next run with the same group resumes from the last
commit, so every selected record is re-driven exactly once per group. A run reads the DLQ only up to
the end it saw at start, so records that fail again after the replay are left for a later run.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from llmpipe.dlq import HEADER_REASON
from llmpipe.errors import PipelineError, SourceError
from llmpipe.kafka_io import (
    Consumer,
    KafkaSettings,
    Message,
    TransactionalProducer,
    await_cluster,
    end_offsets,
    offsets,
    require_topic,
)
from replay.selection import Selection, replay_headers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplaySettings:
    """One replay run."""

    kafka: KafkaSettings
    dlq_topic: str
    group_id: str
    transactional_id: str
    selection: Selection
    dry_run: bool = False
    batch_records: int = 500
    max_records_per_s: float | None = None
    idle_timeout_s: float = 10.0
    assign_timeout_s: float = 120.0


@dataclass
class Outcome:
    """What a run did (or, in a dry run, would do)."""

    read: int = 0
    replayed: Counter[tuple[str, str]] = field(default_factory=Counter)  # (target topic, reason) → n
    skipped: int = 0
    unroutable: int = 0

    @property
    def total_replayed(self) -> int:
        """Records re-driven (or to be re-driven)."""
        return sum(self.replayed.values())


def _reason(message: Message) -> str:
    return next((v.decode() for k, v in message.headers if k == HEADER_REASON), "?")


class Replayer:
    """Reads the DLQ with its own consumer group and re-drives the selected records transactionally."""

    def __init__(self, settings: ReplaySettings) -> None:
        self.s = settings
        await_cluster(settings.kafka)
        require_topic(settings.kafka, settings.dlq_topic, "--dlq-topic")
        if settings.selection.target_topic is not None:
            require_topic(settings.kafka, settings.selection.target_topic, "--target-topic")
        self._targets_seen: set[str] = set()
        self.ends = end_offsets(settings.kafka, settings.dlq_topic)
        # Static membership: a replay restarted after a crash takes its partitions back at once instead of
        # waiting for the dead member's session to expire.
        self.consumer = Consumer(settings.kafka, settings.group_id, [settings.dlq_topic],
                                 {"group.instance.id": settings.transactional_id, "session.timeout.ms": 15000})
        self.producer = None if settings.dry_run else TransactionalProducer(settings.kafka, settings.transactional_id)
        self.done: dict[int, int] = {}
        self.outcome = Outcome()

    def run(self) -> Outcome:
        """Replay everything selected up to the DLQ's end at start; return the counts."""
        idle_since = start = time.monotonic()
        try:
            while not self._finished():
                batch = [m for m in self.consumer.consume(self.s.batch_records, 0.5)
                         if m.offset < self.ends.get(m.partition, 0)]
                if batch:
                    started = time.monotonic()
                    self._handle(batch)
                    self._throttle(len(batch), started)
                    idle_since = time.monotonic()
                elif not self.consumer.assignment():
                    idle_since = time.monotonic()  # idle only counts once we own the partitions
                    if idle_since - start > self.s.assign_timeout_s:
                        msg = f"no DLQ partitions assigned to group {self.s.group_id} in {self.s.assign_timeout_s}s"
                        raise SourceError(msg)
                elif self._caught_up() or time.monotonic() - idle_since > self.s.idle_timeout_s:
                    break
        finally:
            self.consumer.close()
        return self.outcome

    def _finished(self) -> bool:
        return all(self.done.get(p, -1) >= end for p, end in self.ends.items() if end > 0)

    def _caught_up(self) -> bool:
        lag = self.consumer.lag()
        return bool(lag) and not any(lag.values())

    def _handle(self, batch: list[Message]) -> None:
        routed: list[tuple[str, Message]] = []
        for message in batch:
            self.outcome.read += 1
            if not self.s.selection.matches(message):
                self.outcome.skipped += 1
                continue
            target = self.s.selection.target(message)
            if target is None:
                self.outcome.unroutable += 1
                log.warning("no source topic for %s[%d]@%d; use --target-topic", message.topic,
                            message.partition, message.offset)
                continue
            routed.append((target, message))
        if self.producer is not None:
            self._require_targets({target for target, _ in routed})
            self._commit(routed, batch)
        for target, message in routed:
            self.outcome.replayed[(target, _reason(message))] += 1
        for message in batch:
            self.done[message.partition] = max(self.done.get(message.partition, 0), message.offset + 1)

    def _require_targets(self, targets: set[str]) -> None:
        """Check that each target topic exists, once per topic.

        A record sent to a missing topic fails its transaction only after librdkafka's message
        timeout, with an error line per retry, and stops the replay anyway.
        """
        for target in sorted(targets - self._targets_seen):
            require_topic(self.s.kafka, target, "the dead letters' source topic (or --target-topic)")
            self._targets_seen.add(target)

    def _commit(self, routed: list[tuple[str, Message]], batch: list[Message]) -> None:
        """One transaction: the re-driven records and the DLQ offsets after this batch."""
        assert self.producer is not None
        nexts: dict[int, int] = {}
        for message in batch:
            nexts[message.partition] = max(nexts.get(message.partition, 0), message.offset + 1)
        try:
            self.producer.begin()
            for target, message in routed:
                self.producer.produce(target, message.value, message.key, replay_headers(message))
            self.producer.send_offsets(offsets((self.s.dlq_topic, p, o) for p, o in nexts.items()),
                                       self.consumer.group_metadata())
            self.producer.commit()
        except PipelineError as exc:
            msg = f"replay transaction failed, nothing of this batch was committed: {exc}"
            raise type(exc)(msg) from exc

    def _throttle(self, records: int, started: float) -> None:
        """Hold the rate under ``max_records_per_s`` so a large replay does not swamp the stage it feeds."""
        if not self.s.max_records_per_s:
            return
        wanted = records / self.s.max_records_per_s
        spent = time.monotonic() - started
        if wanted > spent:
            time.sleep(wanted - spent)
