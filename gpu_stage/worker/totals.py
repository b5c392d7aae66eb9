"""Counts since start and the steps of a batch: what the progress lines, the metrics and the summary report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from llmpipe import threads

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


THREAD_SAMPLE_S = 1.0
"""Reading every thread's CPU time costs about 10 µs a thread: after a commit, once a second at most."""


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

    def per_batch_ms(self, seconds_by_name: dict[str, float] | None = None) -> str:
        """Mean milliseconds per committed batch of each step (or of ``seconds_by_name``), as ``name=ms`` pairs."""
        n = max(self.batches, 1)
        named = self.stage_seconds if seconds_by_name is None else seconds_by_name
        return " ".join(f"{name}={seconds * 1000 / n:.1f}" for name, seconds in named.items()) or "-"

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
