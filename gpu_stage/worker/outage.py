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

    def unreachable(self, reason: object, since: float | None = None) -> None:
        """Kafka does not answer (the cluster watch says so, or the recovery failed).

        ``since``: when it stopped answering (monotonic s; the cluster watch knows), else now.
        """
        began = time.monotonic() if since is None else since
        self.since = began if self.since is None else min(self.since, began)
        if self.said_unreachable:
            log.debug("Kafka still unreachable: %s", reason)
            return
        self.said_unreachable = True
        log.warning("Kafka unreachable, retrying until it answers (%s)", reason)

    def recovered(self, ended: float | None = None) -> None:
        """A transaction committed at ``ended`` (monotonic s; None: now): the run, if any, is over.

        Unless it ended before the run began: a commit settled only after the outage was seen (the
        loop was held up, in a rebalance, say) says nothing of Kafka now.
        """
        at = time.monotonic() if ended is None else ended
        if self.since is not None and at < self.since:
            log.debug("a commit that ended before the outage began was settled: the outage goes on")
            return
        self._end("Kafka back, transaction recovered after %.1fs (failed transactions: %d)", at)

    def answering_while_idle(self) -> None:
        """Kafka answers and nothing waits to be committed (a failed batch was rewound or its partitions moved on)."""
        self._end("Kafka back after %.1fs (failed transactions: %d; nothing was waiting to be committed)",
                  time.monotonic())  # fmt: skip

    def _end(self, line: str, at: float) -> None:
        """End the run, if any, at ``at`` (monotonic s), saying so if it was more than a lone failure."""
        if self.since is None:
            return
        if self.said_unreachable or self.failures > 1:
            log.warning(line, at - self.since, self.failures)
        self.since, self.failures, self.said_unreachable = None, 0, False
