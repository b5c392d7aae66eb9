"""Header names the connector writes on ``llm.raw`` records, read back by gpu_stage.

Both stages import these constants so a renamed header breaks at import time, not silently in data.
Every header is optional: a reader must treat a missing or unreadable header as "unknown" (null).
"""

from __future__ import annotations

HTTP_STATUS = "http.status"
"""HTTP status code of the vLLM response, ASCII decimal (e.g. ``b"200"``)."""

LATENCY_MS = "latency.ms"
"""Request latency measured by the connector in milliseconds, ASCII decimal integer."""

ATTEMPTS = "attempts"
"""Number of HTTP attempts made (1 when the first call succeeded), ASCII decimal."""

ENDPOINT = "endpoint"
"""URL of the vLLM endpoint that answered, UTF-8."""

MODEL = "model"
"""Model name the request asked for, UTF-8."""

RECEIVED_AT_MS = "received.at.ms"
"""Epoch milliseconds at which the connector received the body, ASCII decimal."""

ATTRIBUTES = "attributes"
"""Request attributes as a compact JSON object of string to string, UTF-8."""

ALL = (HTTP_STATUS, LATENCY_MS, ATTEMPTS, ENDPOINT, MODEL, RECEIVED_AT_MS, ATTRIBUTES)
