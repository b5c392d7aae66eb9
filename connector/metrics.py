"""Prometheus metrics of the connector (fixed label sets; exposed with ``--metrics-port``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


@dataclass(slots=True)
class ConnectorMetrics:
    """All connector metrics, registered in one registry (a fresh one per instance in tests)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    http_responses: Counter = field(init=False)
    latency: Histogram = field(init=False)
    retries: Counter = field(init=False)
    in_flight: Gauge = field(init=False)
    pending: Gauge = field(init=False)
    tokens: Counter = field(init=False)
    valid_json_tokens: Counter = field(init=False)
    records_in: Counter = field(init=False)
    records_out: Counter = field(init=False)
    already_done: Counter = field(init=False)
    commit_wait: Histogram = field(init=False)
    transaction_time: Histogram = field(init=False)
    dead_letters: Counter = field(init=False)
    transactions: Counter = field(init=False)
    producer_recreated: Counter = field(init=False)

    def __post_init__(self) -> None:
        reg = self.registry
        self.http_responses = Counter(
            "connector_http_responses", "HTTP attempts by status (or 'error').", ["status"], registry=reg
        )
        self.latency = Histogram(
            "connector_request_latency_seconds",
            "Latency of successful calls, all attempts.",
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.retries = Counter("connector_retries", "Retries by cause.", ["cause"], registry=reg)
        self.in_flight = Gauge("connector_in_flight", "HTTP calls in progress.", registry=reg)
        self.pending = Gauge(
            "connector_pending", "Records read and not yet behind the committed position.", registry=reg
        )
        self.tokens = Counter("connector_tokens", "Tokens reported by usage.", ["kind"], registry=reg)
        self.valid_json_tokens = Counter(
            "connector_valid_json_completion_tokens",
            "Completion tokens of replies whose first choice is valid JSON (with --content-schema).",
            registry=reg,
        )
        self.records_in = Counter("connector_records_in", "Input records read.", registry=reg)
        self.records_out = Counter("connector_records_out", "Records committed by topic kind.", ["kind"], registry=reg)
        self.already_done = Counter(
            "connector_records_already_done",
            "Input records skipped because an earlier run committed their output (after a restart).",
            registry=reg,
        )
        self.commit_wait = Histogram(
            "connector_commit_wait_seconds",
            "From a call's outcome to its transaction's commit.",
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.transaction_time = Histogram(
            "connector_transaction_seconds",
            "Committed transactions, begin to commit.",
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.dead_letters = Counter("connector_dead_letters", "DLQ records by reason.", ["reason"], registry=reg)
        self.transactions = Counter("connector_transactions", "Transactions by outcome.", ["outcome"], registry=reg)
        self.producer_recreated = Counter(
            "connector_producer_recreated", "Producers recreated after a timed-out commit/abort.", registry=reg
        )
