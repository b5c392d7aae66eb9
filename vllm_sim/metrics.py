"""Prometheus metrics of one simulator instance, in its own registry (several may run in one process)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge


@dataclass(slots=True)
class SimMetrics:
    """Counters named like vLLM's where one exists, so dashboards work against both."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    requests: Counter = field(init=False)
    faults: Counter = field(init=False)
    running: Gauge = field(init=False)
    prompt_tokens: Counter = field(init=False)
    generation_tokens: Counter = field(init=False)

    def __post_init__(self) -> None:
        reg = self.registry
        self.requests = Counter(
            "vllm_sim_requests", "HTTP requests by route and status.", ["route", "status"], registry=reg
        )
        self.faults = Counter("vllm_sim_faults", "Injected faults by kind.", ["kind"], registry=reg)
        self.running = Gauge("vllm:num_requests_running", "Requests being answered now.", registry=reg)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens processed.", registry=reg)
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated.", registry=reg)
