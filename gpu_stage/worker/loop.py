"""The worker's loop: collect a batch, run its transaction, settle the previous commit, until stopped or idle.

The steps themselves live in the mixins :class:`Worker` is made of; this module sets up the shared
state and decides when to stop: on SIGTERM, or once the input stays empty for ``--exit-when-idle``
and the whole group is done with it.
"""

from __future__ import annotations

import logging
import time
from concurrent import futures

from gpu_stage.settings import WorkerSettings
from gpu_stage.transform.api import Backend
from gpu_stage.worker.batches import Collecting
from gpu_stage.worker.calls import call_bound_s
from gpu_stage.worker.commit import Committing
from gpu_stage.worker.outage import Outage
from gpu_stage.worker.totals import STAGES, Totals
from gpu_stage.worker.watchdog import Watchdog, exit_hung
from gpu_stage.worker.wire import value_prefix
from llmpipe.errors import SourceError
from llmpipe.kafka_io import AlwaysAnswering, CallThread, Reachability
from llmpipe.record import FINGERPRINT_HEADER

log = logging.getLogger(__package__)  # the worker's one logger, "gpu_stage.worker"


class Worker(Committing, Collecting):
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
        # Before the consumer joins the group: a registry that is down is waited for with nothing read.
        self._value_prefix = value_prefix(settings, typed_topic, fingerprint)
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
        self._in_flight = None
        self.stopping = False
        self._buffer = self._new_buffer()
        self._watch = watch if watch is not None else AlwaysAnswering()
        self._call_bound_s = call_bound_s(settings.txn_deadline_s)
        self._outage = Outage()
        self._idle_check_failing = False
        self.consumer = self._new_consumer()
        self.producer = self._new_producer()
        self._producer_made_at = time.monotonic()
        self._watchdog = Watchdog(settings.txn_deadline_s, self._watch, exit_hung)
        self._co_partitioned = self._outputs_co_partitioned()
        self._partitioning_stale = False

    def run(self) -> int:
        """Loop until SIGTERM (``stopping``) or the idle timeout; return the exit code."""
        idle_since = time.monotonic()
        last_progress = time.monotonic()
        try:
            while not self.stopping:
                collect_started = time.perf_counter()
                records = self._collect()
                self._collect_s = time.perf_counter() - collect_started
                self._notice_outage()
                parsing = self._parse_ahead(records)
                if not self._settle():
                    if parsing is not None:
                        parsing.stop()
                    continue  # the previous commit failed: rewound, so these records are read again
                if records:
                    self._process(records, parsing)
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
