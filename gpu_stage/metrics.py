"""Prometheus metrics of the worker, with fixed label sets."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECORDS_IN = Counter("gpu_stage_records_in_total", "Raw records consumed and committed")
RECORDS_OUT = Counter("gpu_stage_records_out_total", "Typed records committed")
BAD_RECORDS = Counter("gpu_stage_bad_records_total", "Dead letters committed", ["stage", "reason"])
BATCH_RECORDS = Histogram(
    "gpu_stage_batch_records",
    "Records per batch",
    buckets=(10, 100, 1_000, 5_000, 10_000, 20_000, 50_000, 100_000, 500_000),
)
BATCH_SECONDS = Histogram(
    "gpu_stage_batch_seconds",
    "Batch time from first record to commit",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
PARSE_SECONDS = Histogram(
    "gpu_stage_parse_seconds",
    "Parse and encode time per batch",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
COMMIT_SECONDS = Histogram(
    "gpu_stage_commit_seconds",
    "Transaction commit time per batch (consumer offsets, then commit, which waits for delivery)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
ABORTS = Counter("gpu_stage_transaction_aborts_total", "Aborted transactions", ["cause"])
LAG = Gauge("gpu_stage_consumer_lag", "Records left to read", ["topic", "partition"])
BACKEND = Gauge("gpu_stage_backend_info", "Backend in use (value 1)", ["backend"])
PARSED_ROWS = Counter(
    "gpu_stage_parsed_rows_total",
    "Rows parsed, by what parsed them: device (the GPU lane) and native (the native core: the rows the lane "
    "leaves, and batches below --gpu-min-batch) for the gpu backend, else the backend's name",
    ["engine"],
)
