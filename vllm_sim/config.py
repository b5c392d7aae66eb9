"""Typed, frozen configuration of one simulator instance."""

from __future__ import annotations

from dataclasses import dataclass, field

CONTENT_KINDS = ("prose", "cjk", "json", "fenced", "invalid_json", "reasoning", "tool_call", "long")
DEFAULT_MIX: dict[str, float] = {
    "prose": 3.0,
    "cjk": 1.0,
    "json": 3.0,
    "fenced": 2.0,
    "invalid_json": 1.0,
    "reasoning": 1.0,
    "tool_call": 1.0,
    "long": 0.2,
}


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Probability of each injected fault per HTTP attempt (they are drawn in this order, disjointly)."""

    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_503: float = 0.0
    rate_400: float = 0.0
    rate_hang: float = 0.0
    rate_reset: float = 0.0
    rate_truncate: float = 0.0
    retry_after_s: float = 1.0
    hang_s: float = 120.0

    def total(self) -> float:
        """Sum of all fault rates; must stay ≤ 1 so the draw is a proper distribution."""
        return (
            self.rate_429
            + self.rate_500
            + self.rate_503
            + self.rate_400
            + self.rate_hang
            + self.rate_reset
            + self.rate_truncate
        )


@dataclass(frozen=True, slots=True)
class Latency:
    """Time to first token plus a per-token time, scaled by a bounded random factor."""

    ttft_ms: float = 0.0
    per_token_ms: float = 0.0
    jitter: float = 0.0


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything that decides what the simulator answers."""

    seed: int = 0
    model: str = "llmpipe/sim-8b"
    max_model_len: int = 8192
    faults: FaultRates = field(default_factory=FaultRates)
    latency: Latency = field(default_factory=Latency)
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    long_scale: int = 1
    """Multiplier of the sentence count of ``long`` content (300: bodies of 1.5-3 MB)."""
