"""The delivery-report settings a transactional producer's guarantees are tested under."""

from __future__ import annotations

from typing import Any

REPORTS: dict[str, dict[str, Any]] = {
    "every-report": {},
    "failed-reports-only": {"delivery.report.only.error": True},
}
"""Delivery reports for every record (librdkafka's default, the worker's), or for failed ones only (a
setting a user may pass with ``--producer-config``): either way a refused record fails the commit."""
