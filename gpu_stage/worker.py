"""The exactly-once worker: consume a batch, parse it, produce typed + dead letters, commit, repeat.

One Kafka transaction per batch carries the typed records, the DLQ records and the consumed offsets
(``send_offsets_to_transaction``), so after a crash at any point the committed view holds each raw
record exactly once in typed + DLQ.

A transaction's commit (``commit_transaction``: waiting for the records' delivery and the broker's end
of the transaction) runs on a committer thread while the loop collects the next batch; the next
transaction begins only once it is done. Its offsets were added to the transaction before, so the
commit only completes what is already decided. A rebalance (it can only happen while collecting)
waits for a commit in flight, then we forget what we buffered from revoked partitions. When a commit
fails, the batch collected meanwhile is dropped and the consumer rewinds to the committed offsets:
both batches are read again.

A broker outage is ridden out, not exited on. A transaction that fails while Kafka does not answer
is aborted, or its producer replaced, and the consumer rewound, retried with backoff until Kafka
answers again; the loop then goes on where the last commit left it. The transactional calls run on
the committer thread (:class:`~llmpipe.kafka_io.CallThread`) and are waited for in slices, because
librdkafka can block in them past their timeout: after a broker restart ``send_offsets_to_transaction``
can stay blocked on the restarted broker's old handle for good. A call that still blocks a few seconds
after a :class:`~llmpipe.kafka_io.ClusterWatch` saw Kafka answer again (``RETURN_GRACE_S``), or one
that blocks ``CALL_BOUND_S`` while it answers, is given up and its producer replaced: the new
producer's epoch fences the old one's requests, so whatever it still sends is refused. A producer
that lived through an outage is replaced before it begins its next transaction for the same reason.
The log says each change of state once: the first failure, "Kafka unreachable", "Kafka back".
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import TypeVar, cast

import numpy as np

from gpu_stage import metrics
from gpu_stage.settings import WorkerSettings
from gpu_stage.transform.api import Backend
from gpu_stage.transform.batch import ParseResult, RawBatch
from llmpipe import threads
from llmpipe.dlq import BadRecord
from llmpipe.errors import FencedError, ParseError, PipelineError, SourceError
from llmpipe.kafka_io import (
    ANY_PARTITION,
    AlwaysAnswering,
    CallThread,
    Consumer,
    Message,
    Reachability,
    Records,
    TopicPartitions,
    TransactionalProducer,
    TxnAbortable,
    TxnTimedOut,
    offsets,
)
from llmpipe.record import FINGERPRINT_HEADER

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_MESSAGE_BYTES = 64 << 20
"""Largest typed or DLQ record the worker writes. librdkafka's default (1,000,000) is below the
1 MiB body limit, so a body just under that limit would otherwise fail every retry as a poison pill;
the typed and DLQ topics are created with the same ``max.message.bytes``."""


STAGES = ("collect", "parse", "produce", "commit", "wait", "starved")
"""A batch's steps: waiting for its records, parse and encode (the parse thread's busy time, which
overlaps the enqueueing of earlier chunks), enqueueing the output, the transaction's commit (consumer
offsets, then ``commit_transaction``, which waits for delivery; on the committer thread, overlapping
the next batch's collection), and the loop's wait for the previous batch's commit once it had
collected this one (the part of that commit the collection did not hide: with overlap, only a full
batch waits; a batch below its limits stays open until the commit ends). ``starved`` is the part of
``collect`` spent in consume calls that came back with fewer records than asked for, that is waiting
for fetched records; the rest of ``collect`` is taking records from librdkafka's queue (and waiting
for the GIL meanwhile)."""


CONSUME_MAX_RECORDS = 10_000
"""The most records one consume call of the collect loop asks for."""


THREAD_SAMPLE_S = 1.0
"""Reading every thread's CPU time costs about 10 µs a thread: after a commit, once a second at most."""


COMMIT_POLL_S = 0.002
"""How long one consume call may wait while a batch stays open for the commit in flight: the
granularity at which the loop notices that commit's end."""


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


RECOVERY_BACKOFF_S = (0.5, 5.0)
"""The first and the longest pause between attempts to make the producer usable and rewind while
Kafka does not answer; the pause doubles from one attempt to the next."""


@dataclass
class Outcome:
    """What a batch's transaction carried: the number of typed rows and the dead letters."""

    typed: int = 0
    bad: list[BadRecord] = field(default_factory=list)


@dataclass
class InFlight:
    """A batch whose transaction is committing on the committer thread."""

    records: Records
    outcome: Outcome
    started: float
    """Wall-clock time (epoch s) its processing began."""
    steps: dict[str, float]
    """Its seconds per step (``STAGES``); the committer thread adds the commit's."""
    committed: futures.Future[tuple[float, float]]
    """Resolves to the wall-clock time (epoch s) and the process CPU time when the commit ended."""
    handed_at: float = field(default_factory=time.monotonic)
    """When the commit was handed to the committer thread (monotonic s)."""


@dataclass
class Totals:
    """Counts since start, for progress lines and the exit summary."""

    records_in: int = 0
    typed: int = 0
    dead: int = 0
    batches: int = 0
    aborts: int = 0
    started: float = field(default_factory=time.monotonic)
    first_input_at: float | None = None
    """Wall-clock time (epoch s) the first input record arrived: start of the busy span."""
    last_commit_at: float | None = None
    """Wall-clock time (epoch s) of the last committed batch: end of the busy span."""
    cpu_at_first_input: float = 0.0
    """Process CPU time (s, all threads, librdkafka's included) when the first input record arrived."""
    cpu_at_last_commit: float = 0.0
    """Process CPU time (s) at the last commit; the difference is the busy span's CPU cost."""
    stage_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    """Seconds per step of committed batches (see ``STAGES``): where a batch's latency goes."""
    threads_at_first_input: dict[str, float] = field(default_factory=dict)
    """CPU seconds per thread group (``llmpipe.threads``) when the first input record arrived."""
    threads_sampled: tuple[float, int, dict[str, float]] = (0.0, 0, {})
    """The latest sample after a commit (monotonic time, records in, CPU seconds per thread group),
    taken at most every ``THREAD_SAMPLE_S``: the busy span's CPU by thread without the idle tail."""

    def per_batch_ms(self) -> str:
        """Mean milliseconds per committed batch of each step, as ``name=ms`` pairs."""
        n = max(self.batches, 1)
        return " ".join(f"{name}={seconds * 1000 / n:.1f}" for name, seconds in self.stage_seconds.items())

    def busy_rate(self) -> float:
        """Input records per second from the first input record to the last commit (0 before both)."""
        if self.first_input_at is None or self.last_commit_at is None:
            return 0.0
        return self.records_in / max(self.last_commit_at - self.first_input_at, 1e-9)

    def busy_cpu_us_per_record(self) -> float:
        """Process CPU time per input record over the busy span, in µs (0 before both ends)."""
        if self.first_input_at is None or self.last_commit_at is None or not self.records_in:
            return 0.0
        return (self.cpu_at_last_commit - self.cpu_at_first_input) * 1e6 / self.records_in

    def sample_threads(self) -> None:
        """Take the CPU-by-thread sample after a commit, unless one was taken less than ``THREAD_SAMPLE_S`` ago."""
        now = time.monotonic()
        if now - self.threads_sampled[0] >= THREAD_SAMPLE_S:
            self.threads_sampled = (now, self.records_in, threads.cpu_by_group())

    def busy_cpu_by_thread(self) -> str:
        """CPU µs per input record of each thread group up to the last sample, as ``name=us`` pairs."""
        _, records, sampled = self.threads_sampled
        spent = threads.per_record_us(self.threads_at_first_input, sampled, records)
        return " ".join(f"{name}={us:.2f}" for name, us in spent.items()) or "-"


class Outage:
    """A run of failed transactions or of Kafka not answering, logged once per change of state.

    Its first failed transaction is logged, then once that Kafka does not answer, then once that a
    transaction committed again (or, for a worker that had nothing to commit, that Kafka answers
    again); the attempts in between go to DEBUG. A lone failure that the next commit follows (an
    abort at a rebalance) stays one line.
    """

    def __init__(self) -> None:
        self.since: float | None = None
        """When the run began (monotonic s); None while transactions commit."""
        self.failures = 0
        self.said_unreachable = False

    def failed(self, cause: str, exc: Exception) -> None:
        """A transaction failed."""
        self.failures += 1
        if self.since is None:
            self.since = time.monotonic()
            log.warning("transaction failed (%s): %s; rewinding to committed offsets", cause, exc)
        else:
            log.debug("transaction failed again (%s): %s", cause, exc)

    def unreachable(self, reason: object) -> None:
        """Kafka does not answer (the cluster watch says so, or the recovery failed)."""
        if self.since is None:
            self.since = time.monotonic()
        if self.said_unreachable:
            log.debug("Kafka still unreachable: %s", reason)
            return
        self.said_unreachable = True
        log.warning("Kafka unreachable, retrying until it answers (%s)", reason)

    def recovered(self) -> None:
        """A transaction committed: the run, if any, is over."""
        self._end("Kafka back, transaction recovered after %.1fs (failed transactions: %d)")

    def answering_while_idle(self) -> None:
        """Kafka answers and nothing waits to be committed (a failed batch was rewound or its partitions moved on)."""
        self._end("Kafka back after %.1fs (failed transactions: %d; nothing was waiting to be committed)")

    def _end(self, line: str) -> None:
        if self.since is None:
            return
        if self.said_unreachable or self.failures > 1:
            log.warning(line, time.monotonic() - self.since, self.failures)
        self.since, self.failures, self.said_unreachable = None, 0, False


class Watchdog:
    """Exits the process when transactions stop completing while Kafka answers (``--txn-deadline``).

    Armed when a transaction begins and disarmed when one commits or the worker has nothing to
    commit, so failed attempts and the recovery between them count. Time while Kafka does not answer
    does not: the deadline runs from the later of the arming and the last moment the cluster watch
    saw Kafka unreachable, and it never fires during an outage. What is left is a worker stuck
    against an answering cluster in a way it cannot undo itself: exiting lets a supervisor restart
    it, and the new instance fences the old transaction.
    """

    def __init__(self, deadline_s: float, watch: Reachability,
                 on_hung: Callable[[float], None], tick_s: float = 1.0) -> None:  # fmt: skip
        self.deadline_s = deadline_s
        self._watch = watch
        self._on_hung = on_hung
        self._tick_s = tick_s
        self._armed_since: float | None = None
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="txn-watchdog", daemon=True).start()

    def arm(self) -> None:
        """A transaction begins (an armed watchdog keeps its start: a retried batch is one wait)."""
        if self._armed_since is None:
            self._armed_since = time.monotonic()

    def disarm(self) -> None:
        """A transaction committed, or there is nothing to commit."""
        self._armed_since = None

    def stop(self) -> None:
        """End the watchdog's thread."""
        self._stop.set()

    def stalled_for(self, now: float) -> float:
        """Seconds without a commit while Kafka answered (0 when disarmed or while it does not answer)."""
        since = self._armed_since
        if since is None or self._watch.down_since is not None:
            return 0.0
        return max(0.0, now - max(since, self._watch.last_down_at))

    def _run(self) -> None:
        while not self._stop.wait(self._tick_s):
            if self.stalled_for(time.monotonic()) >= self.deadline_s:
                self._on_hung(self.deadline_s)


class Worker:
    """Runs the consume → parse → produce → commit loop until stopped."""

    def __init__(self, settings: WorkerSettings, backend: Backend, typed_topic: str, fingerprint: str,
                 watch: Reachability | None = None) -> None:  # fmt: skip
        """``watch`` tells an outage from a hang (a running :class:`~llmpipe.kafka_io.ClusterWatch`).

        Without one, Kafka counts as answering all along: a blocked call is given up after
        ``CALL_BOUND_S`` and the watchdog fires ``--txn-deadline`` after a transaction began.
        """
        self.settings = settings
        self.backend = backend
        self.typed_topic = typed_topic
        self._typed_headers = [(FINGERPRINT_HEADER, fingerprint.encode())]
        self.totals = Totals()
        self._steps = dict.fromkeys(STAGES, 0.0)
        """The current batch's seconds per step, added to the totals once it is committed."""
        self._collect_s = 0.0
        self._starved_s = 0.0
        """Of the last collection, the seconds its consume calls waited for records (``STAGES``)."""
        self._parser = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="parse")
        """Parses chunk k+1 of a batch while the loop enqueues chunk k's rows."""
        self._calls = CallThread("commit")
        """Commits batch k's transaction while the loop collects batch k+1; runs the other
        transactional calls too, so that none of them can block the loop for good."""
        self._in_flight: InFlight | None = None
        self.stopping = False
        self._buffer = Records()
        self._watch: Reachability = watch if watch is not None else AlwaysAnswering()
        self._call_bound_s = max(2 * RETURN_GRACE_S, min(CALL_BOUND_S, settings.txn_deadline_s / 2))
        self._outage = Outage()
        self._idle_check_failing = False
        self.consumer = self._new_consumer()
        self.producer = self._new_producer()
        self._producer_made_at = time.monotonic()
        self._watchdog = Watchdog(settings.txn_deadline_s, self._watch, _exit_hung)
        self._co_partitioned = self._outputs_co_partitioned()
        self._partitioning_stale = False

    def _new_consumer(self) -> Consumer:
        s = self.settings
        return Consumer(
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

    def _new_producer(self) -> TransactionalProducer:
        return TransactionalProducer(
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

    def run(self) -> int:
        """Loop until SIGTERM (``stopping``) or the idle timeout; return the exit code."""
        idle_since = time.monotonic()
        last_progress = time.monotonic()
        try:
            while not self.stopping:
                collect_started = time.perf_counter()
                records = self._collect()
                self._notice_outage()
                if not self._settle():
                    continue  # the previous commit failed: rewound, so these records are read again
                if records:
                    self._collect_s = time.perf_counter() - collect_started
                    self._process(records)
                    idle_since = time.monotonic()
                else:
                    self._watchdog.disarm()  # nothing to commit: nothing can hang
                    if self._watch.down_since is None:
                        self._outage.answering_while_idle()
                    else:  # an outage is not idleness: input may be waiting behind it
                        idle_since = time.monotonic()
                    if self._idle_for(idle_since):
                        # Only now is the broker asked whether the group is done: that query can take
                        # seconds on a busy coordinator, and records arriving meanwhile would wait.
                        if self._caught_up():
                            log.info("no input for %.1fs: exiting", self.settings.exit_when_idle_s)
                            break
                        idle_since = time.monotonic()
                if time.monotonic() - last_progress >= self.settings.progress_every_s:
                    self._progress()
                    last_progress = time.monotonic()
            self._settle()
            self._progress()
            self._summary()
        finally:
            self._watchdog.stop()
            self._parser.shutdown(wait=True)
            self._calls.shutdown()
            self.consumer.close()
        return 0

    def _notice_outage(self) -> None:
        """Say once that Kafka does not answer, as soon as the cluster watch sees it."""
        down_since = self._watch.down_since
        if down_since is not None and not self._outage.said_unreachable:
            self._outage.unreachable(f"no answer for {time.monotonic() - down_since:.0f}s")

    def _caught_up(self) -> bool:
        """Every partition of the input is read to its end, by us or by the rest of the group.

        Idle exit must not fire while partitions are still owned by a crashed member (until its
        session times out) or being rebalanced, so partitions we do not own count from the group's
        committed offsets.
        """
        if self.settings.exit_when_idle_s is None:
            return True
        if any(self.consumer.lag(cached=True).values()):
            return False  # our own partitions still hold records: no need to ask the broker
        try:
            lag = self.consumer.lag([self.settings.raw_topic])
        except SourceError as exc:  # the coordinator is busy (members restarting) or down: ask again later
            level = logging.DEBUG if self._idle_check_failing else logging.WARNING  # once per run of failures
            log.log(level, "idle check: no answer on the group's progress, not idle yet (%s)", exc)
            self._idle_check_failing = True
            return False
        self._idle_check_failing = False
        return bool(lag) and not any(lag.values())

    def _idle_for(self, since: float) -> bool:
        limit = self.settings.exit_when_idle_s
        return limit is not None and time.monotonic() - since >= limit

    def _collect(self) -> Records:
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
            buffer.extend(got)
            if self._partitioning_stale:
                self._recheck_partitioning()
        batch, self._buffer = self._buffer, Records()
        return self._owned(batch)

    def _committing(self) -> bool:
        """A commit is in flight and has not ended yet (nor blocked past its time: see ``_overdue``)."""
        in_flight = self._in_flight
        return in_flight is not None and not in_flight.committed.done() and not self._overdue(in_flight.handed_at)

    def _owned(self, batch: Records) -> Records:
        """``batch`` without records of partitions no longer assigned to us.

        A rebalance callback runs inside ``consume``; records a consume call returned together with a
        revocation must not be processed, or their offsets would be committed next to the new owner's.
        """
        seen = batch.partitions_seen()
        if not seen:
            return batch
        owned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        return batch if seen <= owned else batch.without(seen - owned)

    def _process(self, records: Records) -> None:
        """Run the batch's transaction up to its commit, which goes on on the committer thread."""
        started = time.time()
        self._steps = dict.fromkeys(STAGES, 0.0)
        self._steps["collect"] = self._collect_s
        self._steps["starved"] = self._starved_s
        self._watchdog.arm()
        self._in_flight = self._or_recover(lambda: self._transact(records, to_batch(records), started))
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
        self._account(in_flight, *ended)
        self._outage.recovered()
        self._watchdog.disarm()
        return True

    def _or_recover(self, step: Callable[[], T]) -> T | None:
        """``step``'s result; None when its transaction failed and we recovered (see ``_recover``)."""
        try:
            return step()
        except TxnAbortable as exc:
            self._recover("abortable", exc, recreate=False)
        except TxnTimedOut as exc:
            self._recover("timeout", exc, recreate=True)
        return None

    def _check_bad(self, bad: Sequence[BadRecord], n: int) -> None:
        s = self.settings
        if bad and s.on_bad == "fail":
            first = bad[0]
            msg = f"bad record at {first.topic}[{first.partition}]@{first.offset}: {first.reason}: {first.error}"
            raise ParseError(msg)
        if n >= s.min_batch_for_ratio and len(bad) / n > s.max_bad_ratio:
            msg = (
                f"{len(bad)} of {n} records in one batch are bad (> {s.max_bad_ratio:.0%}): "
                "check the input topic and the content schema"
            )
            raise ParseError(msg)

    def _transact(self, records: Records, batch: RawBatch, started: float) -> InFlight:
        """Parse and produce one batch, add its offsets and hand its commit to the committer thread."""
        self._refresh_stale_producer()
        outcome = self._transact_unguarded(records, batch)
        steps, producer = self._steps, self.producer
        committed = self._calls.submit(lambda: self._commit(producer, steps))
        return InFlight(records, outcome, started, steps, committed)

    @staticmethod
    def _commit(producer: TransactionalProducer, steps: dict[str, float]) -> tuple[float, float]:
        """The committer thread's part: commit the transaction."""
        started = time.perf_counter()
        producer.commit()
        steps["commit"] += time.perf_counter() - started
        metrics.COMMIT_SECONDS.observe(steps["commit"])
        return time.time(), time.process_time()

    def _transact_unguarded(self, records: Records, batch: RawBatch) -> Outcome:
        """Begin, parse and produce the batch, then add its consumer offsets to the transaction."""
        producer = self.producer
        producer.begin()
        try:
            outcome = self._parse_and_produce(batch)
            self._check_bad(outcome.bad, len(batch))
        except ParseError:
            producer.abort()  # rows of earlier chunks are in the transaction: they never become visible
            raise
        produce_started = time.perf_counter()
        dlq = self.settings.dlq_topic
        by_source = dlq in self._co_partitioned
        for bad in outcome.bad:
            partition = bad.partition if by_source and bad.partition is not None else ANY_PARTITION
            producer.produce(dlq, bad.raw, bad.key, bad.headers(), partition)
        commit_started = time.perf_counter()
        self._steps["produce"] += commit_started - produce_started
        commit_offsets, group = self._commit_offsets(records), self.consumer.group_metadata()
        self._call(lambda: producer.send_offsets(commit_offsets, group), "send_offsets")
        self._steps["commit"] = time.perf_counter() - commit_started
        return outcome

    def _parse_and_produce(self, batch: RawBatch) -> Outcome:
        """Parse the batch chunk by chunk on the parse thread, enqueueing each chunk's rows meanwhile.

        The backends do their work without the GIL (the native core, the device lane's packing and
        kernels), so chunk k+1 is parsed while this thread hands chunk k's rows to librdkafka: a
        batch takes about the longer of the two instead of their sum. Rows keep the batch order. A
        batch of one chunk (``--parse-chunk-records 0``) is parsed on this thread.
        """
        chunks = [batch.slice(*bounds) for bounds in batch.chunks(self.settings.parse_chunk_records)]
        outcome = Outcome()
        if len(chunks) == 1:  # nothing to overlap: parse on this thread
            self._produce_chunk(self._timed_parse(batch), batch, outcome)
            return outcome
        pending = self._parser.submit(self._timed_parse, chunks[0])
        try:
            for k, chunk in enumerate(chunks):
                result = pending.result()
                if k + 1 < len(chunks):
                    pending = self._parser.submit(self._timed_parse, chunks[k + 1])
                self._produce_chunk(result, chunk, outcome)
        except BaseException:
            pending.cancel()
            futures.wait([pending])  # nothing of this batch runs on into the next one
            raise
        return outcome

    def _produce_chunk(self, result: ParseResult, chunk: RawBatch, outcome: Outcome) -> None:
        """Enqueue the typed rows of ``chunk`` (parsed into ``result``) and add it to the batch's outcome."""
        if self.settings.on_bad == "fail":
            self._check_bad(result.bad, 0)  # stop at the first bad record, before producing more
        produce_started = time.perf_counter()
        self._produce_typed(result, chunk)
        self._steps["produce"] += time.perf_counter() - produce_started
        outcome.typed += len(result.encoded)
        outcome.bad += result.bad

    def _timed_parse(self, batch: RawBatch) -> ParseResult:
        stats = getattr(self.backend, "stats", None)  # the gpu backend's running rows per lane
        native_before = stats.slow_rows if stats is not None else 0
        started = time.perf_counter()
        result = self.backend.parse(batch)
        seconds = time.perf_counter() - started
        self._steps["parse"] += seconds
        metrics.PARSE_SECONDS.observe(seconds)
        if stats is None:
            metrics.PARSED_ROWS.labels(self.backend.name).inc(len(batch))
        else:
            native = stats.slow_rows - native_before
            metrics.PARSED_ROWS.labels("native").inc(native)
            metrics.PARSED_ROWS.labels("device").inc(len(batch) - native)
        return result

    def _produce_typed(self, result: ParseResult, chunk: RawBatch) -> None:
        encoded = result.encoded
        partitions: list[int] | None = None
        if self.typed_topic in self._co_partitioned:  # each row to its raw record's partition
            partitions = np.asarray(chunk.partitions, dtype=np.int64)[encoded.rows].tolist()
        # Each value is a slice of the one encoded buffer (one copy, which librdkafka then takes over).
        self.producer.produce_many(self.typed_topic, encoded.values(), encoded.keys, self._typed_headers, partitions)

    def _commit_offsets(self, records: Records) -> TopicPartitions:
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
        self._buffer = Records()
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

    def _account(self, batch: InFlight, committed_at: float, cpu_at_commit: float) -> None:
        records, outcome = batch.records, batch.outcome
        t = self.totals
        t.last_commit_at = committed_at
        t.cpu_at_last_commit = cpu_at_commit
        t.batches += 1
        t.records_in += len(records)
        t.typed += outcome.typed
        t.dead += len(outcome.bad)
        metrics.RECORDS_IN.inc(len(records))
        metrics.RECORDS_OUT.inc(outcome.typed)
        for (stage, reason), n in Counter((bad.stage, bad.reason.value) for bad in outcome.bad).items():
            metrics.BAD_RECORDS.labels(stage, reason).inc(n)
        for name, seconds in batch.steps.items():
            t.stage_seconds[name] += seconds
        t.sample_threads()
        metrics.BATCH_RECORDS.observe(len(records))
        metrics.BATCH_SECONDS.observe(committed_at - batch.started)
        if log.isEnabledFor(logging.DEBUG):  # per batch: where a slow one spent its time
            steps = " ".join(f"{name}={seconds * 1000:.1f}" for name, seconds in batch.steps.items())
            log.debug("batch %d: %d records, %.1f ms from start to commit; ms: %s", t.batches, len(records),
                      (committed_at - batch.started) * 1000, steps)  # fmt: skip

    def _progress(self) -> None:
        t = self.totals
        elapsed = max(time.monotonic() - t.started, 1e-9)
        for (topic, part), lag in self.consumer.lag(cached=True).items():
            metrics.LAG.labels(topic, str(part)).set(lag)
        log.info(
            "batches=%d in=%d typed=%d dlq=%d aborts=%d rate=%.0f rec/s backend=%s",
            t.batches,
            t.records_in,
            t.typed,
            t.dead,
            t.aborts,
            t.records_in / elapsed,
            self.backend.name,
        )

    def _summary(self) -> None:
        """One closing line with the busy span, so runs can be compared without scraping metrics."""
        t = self.totals
        log.info(
            "summary: in=%d typed=%d dlq=%d batches=%d aborts=%d first_input_at=%.3f last_commit_at=%.3f "
            "busy_rate=%.0f rec/s backend=%s busy_cpu=%.2f us/rec per_batch_ms: %s cpu_us_per_record_by_thread: %s",
            t.records_in,
            t.typed,
            t.dead,
            t.batches,
            t.aborts,
            t.first_input_at or 0.0,
            t.last_commit_at or 0.0,
            t.busy_rate(),
            self.backend.name,
            t.busy_cpu_us_per_record(),
            t.per_batch_ms(),
            t.busy_cpu_by_thread(),
        )


EXIT_HUNG = 75


def _exit_hung(deadline_s: float) -> None:
    log.critical("no transaction completed for %.0fs while Kafka answered: exiting %d so that a restart fences "
                 "the stuck one", deadline_s, EXIT_HUNG)  # fmt: skip
    logging.shutdown()
    os._exit(EXIT_HUNG)


def to_batch(records: Records | list[Message]) -> RawBatch:
    """Columnar batch of consumed records (a missing value counts as an empty body)."""
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
