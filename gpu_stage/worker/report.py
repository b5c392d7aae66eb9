"""What the worker tells about its work: counts and metrics per committed batch, progress lines, the summary.

Only committed batches count (an aborted batch is read again and counted then), so the totals match
what ``read_committed`` consumers of the outputs see.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from gpu_stage import metrics
from gpu_stage.runtime import backend_stages
from gpu_stage.worker.state import InFlight, WorkerState

log = logging.getLogger(__package__)  # the worker's one logger, "gpu_stage.worker"


class Reporting(WorkerState):
    """Accounting for committed batches, and the progress and summary lines."""

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
            "busy_rate=%.0f rec/s backend=%s busy_cpu=%.2f us/rec per_batch_ms: %s backend_ms_per_batch: %s "
            "cpu_us_per_record_by_thread: %s",
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
            t.per_batch_ms(backend_stages(self.backend)),
            t.busy_cpu_by_thread(),
        )
