"""The delivery-report settings a transactional producer's guarantees are tested under."""

from __future__ import annotations

from typing import Any

from gpu_stage.worker.producer import FAILED_DELIVERIES_ONLY

REPORTS: dict[str, dict[str, Any]] = {"every-report": {}, "failed-reports-only": FAILED_DELIVERIES_ONLY}
"""Delivery reports for every record (librdkafka's default), or for failed ones only (the worker's)."""
