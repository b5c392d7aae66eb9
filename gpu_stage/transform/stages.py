"""Per-stage wall time of the GPU backend, so a benchmark can say which stage bounds the rate.

Kept apart from the device code (no cuDF import) so the bench and the CPU-side tests can use it.
Device work is asynchronous: with a ``sync`` callable the clock waits for the device at each stage
edge, which charges kernels to the stage that launched them (and costs a little throughput).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class StageClock:
    """Seconds spent per named stage since the last :meth:`reset`."""

    sync: Callable[[], None] | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the ``with`` body as stage ``name`` (accumulated over calls)."""
        if self.sync is not None:
            self.sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.sync is not None:
                self.sync()
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def add(self, name: str, seconds: float) -> None:
        """Count ``seconds`` timed elsewhere (on a native thread) to stage ``name``."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def reset(self) -> None:
        """Forget earlier timings (a benchmark resets after its warm-up batch)."""
        self.seconds.clear()

    def rounded(self, digits: int = 4) -> dict[str, float]:
        """The timings, rounded, for a result file."""
        return {name: round(value, digits) for name, value in self.seconds.items()}
