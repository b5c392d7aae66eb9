"""The last resort against a transaction that hangs while Kafka answers: exit, so that a restart fences it.

Everything else the worker does about failures keeps the process alive; this is the one case it
cannot undo from inside (a librdkafka call stuck for good), so it runs on its own thread, apart
from the loop it watches.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from llmpipe.kafka_io import Reachability

log = logging.getLogger(__package__)  # the worker's one logger, "gpu_stage.worker"


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


EXIT_HUNG = 75


def exit_hung(deadline_s: float) -> None:
    """The worker's ``on_hung``: log why, then exit at once (the stuck call would block a clean exit)."""
    log.critical("no transaction completed for %.0fs while Kafka answered: exiting %d so that a restart fences "
                 "the stuck one", deadline_s, EXIT_HUNG)  # fmt: skip
    logging.shutdown()
    os._exit(EXIT_HUNG)
