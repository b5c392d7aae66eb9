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
from gpu_stage.backends.base import Backend
from gpu_stage.batch import ParseResult, RawBatch
from gpu_stage.settings import WorkerSettings
from llmpipe import threads
from llmpipe.dlq import BadRecord
from llmpipe.errors import ParseError, SourceError
from llmpipe.kafka_io import (
    ANY_PARTITION,
    Consumer,
    Message,
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


class Worker:
    """Runs the consume → parse → produce → commit loop until stopped."""

    def __init__(self, settings: WorkerSettings, backend: Backend, typed_topic: str, fingerprint: str) -> None:
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
        self._committer = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="commit")
        """Commits batch k's transaction while the loop collects batch k+1."""
        self._in_flight: InFlight | None = None
        self.stopping = False
        self._buffer = Records()
        self.consumer = self._new_consumer()
        self.producer = self._new_producer()
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
        outcome, failure included, is handled by the loop after the consume call).
        """
        if self._in_flight is not None:
            futures.wait([self._in_flight.committed])
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
                if not self._settle():
                    continue  # the previous commit failed: rewound, so these records are read again
                if records:
                    self._collect_s = time.perf_counter() - collect_started
                    self._process(records)
                    idle_since = time.monotonic()
                elif self._idle_for(idle_since):
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
            self._parser.shutdown(wait=True)
            self._committer.shutdown(wait=True)
            self.consumer.close()
        return 0

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
        except SourceError as exc:  # the coordinator is busy (members restarting): ask again later
            log.warning("idle check: no answer on the group's progress, not idle yet (%s)", exc)
            return False
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
        """A commit is in flight and has not ended yet."""
        return self._in_flight is not None and not self._in_flight.committed.done()

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
        ended = self._or_recover(in_flight.committed.result)
        if ended is None:
            return False
        in_flight.steps["wait"] = time.perf_counter() - waited
        self._account(in_flight, *ended)
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
        """Parse and produce one batch, add its offsets and start its commit, under a watchdog.

        librdkafka's ``send_offsets_to_transaction`` can block past its timeout when the group
        coordinator disappears (confluentinc/librdkafka#5456). A hung transaction is never committed,
        so exiting lets the supervisor restart us; the new instance fences the old transaction. The
        watchdog stops when the commit ends.
        """
        watchdog = threading.Timer(self.settings.txn_deadline_s, _exit_hung, (self.settings.txn_deadline_s,))
        watchdog.daemon = True
        watchdog.start()
        try:
            outcome = self._transact_unguarded(records, batch)
            steps, producer = self._steps, self.producer
            committed = self._committer.submit(self._commit, producer, steps, watchdog)
        except BaseException:
            watchdog.cancel()
            raise
        return InFlight(records, outcome, started, steps, committed)

    @staticmethod
    def _commit(
        producer: TransactionalProducer, steps: dict[str, float], watchdog: threading.Timer
    ) -> tuple[float, float]:
        """The committer thread's part: commit the transaction, then stop its watchdog."""
        try:
            started = time.perf_counter()
            producer.commit()
            steps["commit"] += time.perf_counter() - started
            metrics.COMMIT_SECONDS.observe(steps["commit"])
            return time.time(), time.process_time()
        finally:
            watchdog.cancel()

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
        producer.send_offsets(self._commit_offsets(records), self.consumer.group_metadata())
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
        """Abort (or replace the producer), then rewind so the batch is read again."""
        log.warning("transaction failed (%s): %s; rewinding to committed offsets", cause, exc)
        metrics.ABORTS.labels(cause).inc()
        self.totals.aborts += 1
        if recreate:
            self.producer = self._new_producer()
        else:
            try:
                self.producer.abort()
            except TxnTimedOut:
                self.producer = self._new_producer()
        self._buffer = Records()
        self.consumer.rewind_to_committed()

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
    log.critical("a transaction did not finish in %.0fs: exiting %d so a restart fences it", deadline_s, EXIT_HUNG)
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
