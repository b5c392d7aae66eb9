"""Log wiring of the Kafka package: librdkafka's lines and the package's own, with repeats collapsed.

librdkafka hands its lines to the ``librdkafka`` logger (``KafkaSettings.client_config`` sets it as
every client's ``logger``); during an outage it would log the same line every few hundred milliseconds.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("llmpipe.kafka_io")
"""The package's one logger: its lines keep the name they always had, and one :class:`RepeatFilter` sees them all."""
rdkafka_log = logging.getLogger("librdkafka")
SYSLOG_LEVELS = {0: logging.CRITICAL, 1: logging.CRITICAL, 2: logging.CRITICAL, 3: logging.ERROR,
                 4: logging.WARNING, 5: logging.INFO, 6: logging.INFO, 7: logging.DEBUG}  # fmt: skip
"""librdkafka's syslog levels as logging levels."""


def log_queued(take_logs: Callable[[], tuple[list[tuple[int, str, str]], int]]) -> None:
    """Log the lines a native client queued from librdkafka's threads (``take_logs``) on this thread."""
    lines, dropped = take_logs()
    for level, facility, text in lines:
        rdkafka_log.log(SYSLOG_LEVELS.get(level, logging.INFO), "%s: %s", facility, text)
    if dropped:
        rdkafka_log.warning("%d librdkafka log lines dropped between two calls", dropped)

REPEAT_WINDOW_S = 60.0
"""librdkafka retries a lost broker every few hundred milliseconds and logs every attempt; the same
line (numbers aside) is let through once, then once more per this window with its count."""


class RepeatFilter(logging.Filter):
    """Lets a log line through when it differs from the previous one (its digits ignored), else once a window.

    An outage then reads as a few lines, one per change of state ("connect failed", "timed out",
    back up), not thousands; a repeat that is let through says how often it was held back.
    """

    def __init__(self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._last: str | None = None
        self._since = 0.0
        self._held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """True to emit ``record``; a repeat inside the window is held back and counted."""
        shape = _DIGITS.sub("#", record.getMessage())
        now = self._clock()
        if shape == self._last and now - self._since < self.window_s:
            self._held += 1
            return False
        if shape == self._last and self._held:
            record.msg = f"{record.getMessage()} (the same {self._held} more times in {now - self._since:.0f}s)"
            record.args = ()
        self._last, self._since, self._held = shape, now, 0
        return True


_DIGITS = re.compile(r"\d+")
rdkafka_log.addFilter(RepeatFilter())
log.addFilter(RepeatFilter())  # the package's own retry warnings (consume errors, transaction retries)


class DemotedLog:
    """A librdkafka ``logger`` that passes every line on at DEBUG.

    For a client whose failures its caller reports in its own words (a start-up wait, a probe):
    librdkafka's lines about the same failure would only repeat them, at ERROR.
    """

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def log(self, level: int, msg: str, *args: Any) -> None:
        """Log ``msg % args`` at DEBUG, whatever ``level`` librdkafka gave it."""
        del level
        self._logger.debug(msg, *args)
