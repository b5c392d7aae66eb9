"""The log of a broker outage: one line per change of state instead of one per failed attempt.

While Kafka does not answer, the worker retries every few seconds for as long as the outage lasts;
logging each attempt would bury the lines that matter (when it began, when Kafka answered again).
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__package__)  # the worker's one logger, "gpu_stage.worker"


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
