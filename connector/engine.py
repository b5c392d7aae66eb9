"""The connector's loop: read → call vLLM concurrently → commit each finished call promptly.

Threads: the asyncio loop runs intake, HTTP calls and the committer; every Kafka call (poll, produce,
commit, rebalance callbacks) runs on one dedicated thread so a slow commit never stalls HTTP I/O.
The windows are shared by both and guarded by one lock.

Exactly once: a transaction holds the outputs of every call finished since the last one, whatever is
still running before them, plus each touched partition's progress (the position over the contiguous
done prefix, and the done offsets ahead of it; see :mod:`connector.progress`). A crash at any point
leaves committed outputs and progress consistent: a restart reads from the position and skips the
done offsets, so only calls that were running or finished-but-uncommitted at the crash are made again.
A slow or retried request delays only its own record, never the ones read after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from connector import records
from connector.guard import GuardedCalls
from connector.http import Caller, Failure, Reply
from connector.metrics import ConnectorMetrics
from connector.progress import Progress
from connector.requests import BodyOptions, Rejected, Request, parse
from connector.sources import Item, Partition, Source
from connector.tracker import Window
from llmpipe import kafka_io
from llmpipe.errors import DeliveryError, FencedError, PipelineError, SourceError

log = logging.getLogger(__name__)
T = TypeVar("T")
PROGRESS_EVERY_S = 10.0
"""A progress line at most this often, and the committer's longest sleep without news."""
RETRY_PAUSE_S = 0.2
"""Pause after a failed transaction before the next try."""
SLOW_TRANSACTION_S = 5.0
"""A transaction that took this long waited for Kafka: its end is logged as the end of an outage."""


@dataclass(frozen=True, slots=True)
class Finished:
    """A call's output and when it was ready (``time.monotonic()``), for the commit-wait metric."""

    out: records.Out
    at: float


_Mark = tuple[Window[Finished], list[int]]


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """Flow-control knobs and topic names."""

    raw_topic: str
    dlq_topic: str
    endpoint: str
    body: BodyOptions
    max_in_flight: int = 256
    max_pending: int = 2048
    commit_interval_s: float = 0.05
    max_txn_records: int = 5000
    drain_timeout_s: float = 30.0
    poll_batch: int = 500
    max_record_bytes: int = records.MAX_RECORD_BYTES


@dataclass(slots=True)
class Stats:
    """Counts for progress lines and for callers (tests, benchmark).

    Times are ``time.monotonic()``: ``started`` when the engine was built (before Kafka start-up),
    ``first_call`` when the first HTTP call began, ``last_commit`` when the last transaction committed.
    """

    read: int = 0
    already_done: int = 0
    committed: int = 0
    dead_letters: int = 0
    transactions: int = 0
    longest_transaction_s: float = 0.0
    aborted: int = 0
    started: float = field(default_factory=time.monotonic)
    first_call: float | None = None
    last_commit: float | None = None

    def work_rate(self) -> float:
        """Committed records per second from the first call to the last commit (0 before both)."""
        if self.first_call is None or self.last_commit is None or self.last_commit <= self.first_call:
            return 0.0
        return self.committed / (self.last_commit - self.first_call)


class Engine:
    """One connector instance: a source, an HTTP caller and a transactional producer."""

    def __init__(
        self,
        options: EngineOptions,
        source_factory: Callable[[Callable[[list[Partition]], None]], Source],
        caller: Caller,
        producer_factory: Callable[[], kafka_io.TransactionalProducer],
        metrics: ConnectorMetrics,
        watch: kafka_io.Reachability | None = None,
    ) -> None:
        self.options = options
        self.caller = caller
        self.metrics = metrics
        self.stats = Stats()
        self._producer_factory = producer_factory
        self._source_factory = source_factory
        self._kafka = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka")
        self._lock = threading.Lock()
        self._trackers: dict[Partition, Window[Finished]] = {}
        self._pending = 0
        self._stop = asyncio.Event()
        self._finished = asyncio.Event()
        self._ready = asyncio.Event()  # something to commit: wakes the committer
        self._slots = asyncio.Semaphore(options.max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        self._source: Source | None = None
        self._producer: kafka_io.TransactionalProducer | None = None
        self._down_since: float | None = None
        self._guard = GuardedCalls(watch or kafka_io.AlwaysAnswering())
        self._replaced_stale = False
        self._last_txn_s = 0.0
        """When transactions began to fail in a row (Kafka unreachable, say); None while they succeed."""
        # Labelled children looked up once: ``labels()`` takes a lock and a dict lookup per call.
        self._prompt_tokens = metrics.tokens.labels("prompt")
        self._completion_tokens = metrics.tokens.labels("completion")

    def stop(self) -> None:
        """Ask for a clean stop: no more intake, finish calls (bounded), commit, return."""
        self._stop.set()

    async def _on_kafka(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._kafka, fn, *args)

    def _revoke(self, parts: list[Partition]) -> None:
        """Rebalance callback (Kafka thread): forget lost partitions; their late results are dropped.

        Nothing of theirs is in an open transaction (transactions open and close within one call on
        this same thread), so the new owner restarts exactly from the committed offsets.
        """
        with self._lock:
            for part in parts:
                tracker = self._trackers.pop(part, None)
                if tracker is not None:
                    self._pending -= len(tracker)
            log.info("partitions revoked: %s", parts)

    async def run(self) -> Stats:
        """Run until the source is exhausted and committed, or until :meth:`stop`.

        A fatal commit error (fencing) stops intake and is raised after in-flight calls are cancelled.
        """
        self._producer = await self._on_kafka(self._guard.make, self._producer_factory)
        self._source = await self._on_kafka(self._source_factory, self._revoke)
        committer = asyncio.create_task(self._commit_loop())
        work = asyncio.create_task(self._intake_then_drain(self._source))
        try:
            await asyncio.wait({committer, work}, return_when=asyncio.FIRST_COMPLETED)
            if committer.done():
                work.cancel()
                for task in list(self._tasks):
                    task.cancel()
                committer.result()
            await work
            self._finished.set()
            self._ready.set()
            await committer
        finally:
            self._finished.set()
            await self._on_kafka(self._source.close)
            self._kafka.shutdown(wait=True)
            self._guard.close()
        self._progress()
        return self.stats

    async def _intake_then_drain(self, source: Source) -> None:
        await self._intake(source)
        await self._drain()

    async def _intake(self, source: Source) -> None:
        while not self._stop.is_set():
            room = self.options.max_pending - self._pending
            if room <= 0:
                await asyncio.sleep(0.005)
                continue
            items = await self._on_kafka(source.poll, min(room, self.options.poll_batch), 0.05)
            if not items:
                if await self._on_kafka(source.exhausted):
                    return
                continue
            for item in items:
                await self._admit(item)

    async def _admit(self, item: Item) -> None:
        """Register the item, then skip it (done before), answer it now (bad input) or start its call."""
        with self._lock:
            tracker = self._trackers.get(item.partition)
            if tracker is None:
                tracker = self._trackers[item.partition] = Window(ahead=set(item.ahead))
            tracker.register(item.offset, done=item.done)
            self._pending += 1
        self.stats.read += 1
        self.metrics.records_in.inc()
        if item.done:
            self.stats.already_done += 1
            self.metrics.already_done.inc()
            self._ready.set()
            return
        origin = records.Origin(item.partition[0], item.partition[1], item.offset, item.value)
        parsed = parse(item.value, self.options.body)
        if isinstance(parsed, Rejected):
            rejected = records.rejected_record(self.options.dlq_topic, origin, parsed, self.options.max_record_bytes)
            self._complete(tracker, item.offset, rejected)
            return
        await self._slots.acquire()
        task = asyncio.create_task(self._call(tracker, origin, parsed))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, tracker: Window[Finished], origin: records.Origin, request: Request) -> None:
        if self.stats.first_call is None:
            self.stats.first_call = time.monotonic()
        self.metrics.in_flight.inc()
        try:
            result = await self.caller.call(request.request_id, request.body)
        finally:
            self.metrics.in_flight.dec()
            self._slots.release()
        self._complete(tracker, origin.offset, self._output(origin, request, result))

    def _output(self, origin: records.Origin, request: Request, result: Reply | Failure) -> records.Out:
        """The record for a finished call; a reply too large for one Kafka record is a dead letter.

        The size is checked here, not left to the producer: a record the producer or broker refuses
        would fail its transaction on every retry and stop all progress behind it.
        """
        limit = self.options.max_record_bytes
        if isinstance(result, Failure):
            return records.failed_record(self.options.dlq_topic, origin, request, result, limit)
        raw = records.raw_record(self.options.raw_topic, self.options.endpoint, request, result)
        if not records.fits(raw, limit):
            return records.too_large_record(self.options.dlq_topic, origin, request, raw, limit)
        self._count_tokens(result.body)
        return raw

    def _count_tokens(self, body: bytes) -> None:
        try:
            parsed = orjson.loads(body)
            usage = parsed["usage"]
            self._prompt_tokens.inc(usage["prompt_tokens"])
            self._completion_tokens.inc(usage["completion_tokens"])
            if self.options.body.response_format is not None:
                orjson.loads(parsed["choices"][0]["message"]["content"])
                self.metrics.valid_json_tokens.inc(usage["completion_tokens"])
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            return

    def _complete(self, tracker: Window[Finished], offset: int, out: records.Out) -> None:
        with self._lock:
            tracker.complete(offset, Finished(out, time.monotonic()))
        self._ready.set()

    async def _drain(self) -> None:
        """At end of input wait for every call; after stop() wait at most the drain timeout.

        Calls still running at the deadline are cancelled: their records stay uncommitted and are
        read and called again by the next run.
        """
        while self._tasks and not self._stop.is_set():
            await asyncio.wait(set(self._tasks), timeout=0.2)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.options.drain_timeout_s)
        for task in list(self._tasks):
            task.cancel()
        # Nothing more will finish: wait until the committer has taken what is left.
        while self._work_left():
            self._ready.set()
            await asyncio.sleep(0.01)

    def _work_left(self) -> bool:
        with self._lock:
            return any(t.has_work() for t in self._trackers.values())

    async def _commit_loop(self) -> None:
        """Commit as soon as something finished, at most once per interval; at the end, one last round.

        Transactions run back to back while calls keep finishing, so a finished call waits for at
        most the transaction under way and its own; the interval only spaces them when load is light.
        """
        last_log = time.monotonic()
        while True:
            finished = self._finished.is_set()
            self._ready.clear()
            began = time.monotonic()
            ok = await self._on_kafka(self._commit_once)
            if finished:
                return
            if time.monotonic() - last_log >= PROGRESS_EVERY_S:
                last_log = time.monotonic()
                self._progress()
            if not ok:  # a failed transaction is retried after a pause, even when woken
                await asyncio.sleep(max(self.options.commit_interval_s, RETRY_PAUSE_S))
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PROGRESS_EVERY_S):
                    await self._ready.wait()
            await asyncio.sleep(max(0.0, began + self.options.commit_interval_s - time.monotonic()))

    def _progress(self) -> None:
        rate = self.stats.committed / max(1e-9, time.monotonic() - self.stats.started)
        log.info(
            "committed=%d (%.0f/s) read=%d already_done=%d pending=%d dlq=%d txns=%d aborted=%d",
            self.stats.committed,
            rate,
            self.stats.read,
            self.stats.already_done,
            self._pending,
            self.stats.dead_letters,
            self.stats.transactions,
            self.stats.aborted,
        )

    def _take_ready(self) -> tuple[list[Finished], dict[Partition, Progress], dict[Partition, _Mark]]:
        """The finished outputs (up to a transaction's worth) and each touched partition's progress."""
        taken: list[Finished] = []
        progress: dict[Partition, Progress] = {}
        marks: dict[Partition, _Mark] = {}
        with self._lock:
            for part, tracker in self._trackers.items():
                room = self.options.max_txn_records - len(taken)
                if room <= 0:
                    break
                if not tracker.has_work():
                    continue
                finished = tracker.finished(room)
                offsets = [offset for offset, _ in finished]
                after = tracker.progress_after(offsets)
                if after is not None:
                    taken.extend(result for _, result in finished)
                    progress[part] = after
                    marks[part] = (tracker, offsets)
        return taken, progress, marks

    def _commit_once(self) -> bool:
        """One transaction over every call finished since the last (Kafka thread); False if it failed."""
        taken, progress, marks = self._take_ready()
        if not progress or self._source is None:
            return True
        self._replaced_stale = self._producer is not None and self._guard.producer_is_stale()
        if self._replaced_stale:
            log.info("Kafka was unreachable since the transactional producer was made: replacing it")
            self._recreate()
        if self._producer is None and not self._make_producer():
            return False
        outs = [f.out for f in taken]
        if not self._transact(outs, progress):
            return False
        if self._down_since is not None:
            log.warning("transactions resumed after %.1fs of failures", time.monotonic() - self._down_since)
            self._down_since = None
        elif self._replaced_stale:
            log.warning("transactions resumed with a new producer after Kafka was unreachable")
        elif self._last_txn_s >= SLOW_TRANSACTION_S:
            log.warning("transactions resumed: the last one took %.1fs (Kafka unreachable or overloaded meanwhile)",
                        self._last_txn_s)  # fmt: skip
        with self._lock:
            for part, (tracker, offsets) in marks.items():
                if self._trackers.get(part) is tracker:
                    self._pending -= tracker.commit(offsets)
        self._committed(taken)
        return True

    def _committed(self, taken: list[Finished]) -> None:
        now = time.monotonic()
        for finished in taken:
            self.metrics.commit_wait.observe(now - finished.at)
        outs = [f.out for f in taken]
        self.stats.last_commit = now
        self.stats.committed += len(outs)
        self.stats.transactions += 1
        self.metrics.transactions.labels("committed").inc()
        self.metrics.pending.set(self._pending)
        reasons = Counter(out.reason for out in outs if out.reason is not None)
        dead = sum(reasons.values())
        self.stats.dead_letters += dead
        for reason, count in reasons.items():
            self.metrics.dead_letters.labels(reason).inc(count)
        if dead:
            self.metrics.records_out.labels("dlq").inc(dead)
        if len(outs) > dead:
            self.metrics.records_out.labels("raw").inc(len(outs) - dead)

    def _transact(self, outs: list[records.Out], progress: dict[Partition, Progress]) -> bool:
        """Produce + progress + commit; on failure abort or recreate, and report False (retry later)."""
        producer, source = self._producer, self._source
        assert producer is not None and source is not None
        try:
            began = time.monotonic()
            self._guard.run(lambda: self._transaction(producer, source, outs, progress), "transaction")
            took = self._last_txn_s = time.monotonic() - began
            self.metrics.transaction_time.observe(took)
            self.stats.longest_transaction_s = max(self.stats.longest_transaction_s, took)
            return True
        except FencedError:
            log.error("producer fenced: another instance owns %s; stopping", "the transactional id")
            raise
        except kafka_io.TxnAbortable as exc:
            self._failing("transaction aborted, retrying", exc)
            self._abort_or_recreate(producer)
        except DeliveryError as exc:  # TxnTimedOut or unknown outcome: new epoch fences stale requests
            self._failing("transaction outcome unknown, recreating the producer", exc)
            self._recreate()
        except SourceError as exc:  # the input's part of the transaction (offsets, state) failed
            self._failing("transaction failed, recreating the producer", exc)
            self._recreate()
        self.stats.aborted += 1
        self.metrics.transactions.labels("aborted").inc()
        return False

    @staticmethod
    def _transaction(
        producer: kafka_io.TransactionalProducer,
        source: Source,
        outs: list[records.Out],
        progress: dict[Partition, Progress],
    ) -> None:
        """The transaction's calls, run on the guard's call thread."""
        producer.begin()
        for out in outs:
            producer.produce(out.topic, out.value, out.key, out.headers)
        source.commit_into(producer, progress)
        producer.commit()

    def _failing(self, what: str, exc: Exception) -> None:
        """Note a failed transaction; only the first of a run of failures is logged (an outage is one line)."""
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning("%s: %s (retrying until Kafka answers; one line when it does)", what, exc)
        else:
            log.debug("%s: %s", what, exc)

    def _abort_or_recreate(self, producer: kafka_io.TransactionalProducer) -> None:
        try:
            self._guard.run(producer.abort, "abort_transaction")
        except FencedError:
            raise
        except DeliveryError as exc:
            log.debug("abort failed, recreating the producer: %s", exc)
            self._recreate()

    def _recreate(self) -> None:
        """Drop the producer; a new one (a new epoch that fences the old one's requests) is made before the next try."""
        self.metrics.producer_recreated.inc()
        self._producer = None
        self._make_producer()

    def _make_producer(self) -> bool:
        """Create the producer; False while Kafka does not answer (tried again before the next transaction)."""
        try:
            self._producer = self._guard.make(self._producer_factory)
        except FencedError:
            raise
        except PipelineError as exc:
            self._failing("cannot create the transactional producer", exc)
            return False
        return True
