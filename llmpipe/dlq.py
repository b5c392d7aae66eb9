"""Dead-letter envelope shared by every stage.

A bad record travels to the DLQ topic with its original bytes as the value and the facts about it in
headers that follow the Kafka Connect dead-letter convention, so standard tooling can read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Reason(StrEnum):
    """Closed list of reason codes a dead letter can carry (documented in the README)."""

    INVALID_JSON = "invalid_json"
    INVALID_UTF8 = "invalid_utf8"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_FIELD = "missing_field"
    WRONG_TYPE = "wrong_type"
    TOO_LARGE = "too_large"
    UPSTREAM_ERROR = "upstream_error"
    HTTP_STATUS = "http_status"
    RETRIES_EXHAUSTED = "retries_exhausted"
    INVALID_REQUEST = "invalid_request"


HEADER_STAGE = "__dlq.stage"
STAGE_CONNECTOR = "connector"
"""``__dlq.stage`` of the connector's dead letters, whose value is the request itself."""
HEADER_REASON = "__dlq.reason"
HEADER_ERROR = "__connect.errors.exception.message"
HEADER_CLASS = "__connect.errors.exception.class.name"
HEADER_TOPIC = "__connect.errors.topic"
HEADER_PARTITION = "__connect.errors.partition"
HEADER_OFFSET = "__connect.errors.offset"
MAX_ERROR_TEXT = 1000


@dataclass(frozen=True, slots=True)
class BadRecord:
    """One record a stage could not turn into output, with everything needed to replay it."""

    raw: bytes
    stage: str
    reason: Reason
    error: str
    key: bytes | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    source_headers: tuple[tuple[str, bytes], ...] = ()

    def headers(self) -> list[tuple[str, bytes]]:
        """Kafka headers for the DLQ record: the source record's own headers, then the error facts.

        Keeping the source headers (the Kafka Connect convention) lets consumers of the DLQ group dead
        letters by request facts such as ``attributes``; the error text is capped so one record cannot
        bloat them.
        """
        ours = {HEADER_STAGE, HEADER_REASON, HEADER_ERROR, HEADER_CLASS, HEADER_TOPIC, HEADER_PARTITION, HEADER_OFFSET}
        kept = [(name, value) for name, value in self.source_headers if name not in ours]
        pairs = [
            (HEADER_STAGE, self.stage),
            (HEADER_REASON, self.reason.value),
            (HEADER_CLASS, self.reason.name),
            (HEADER_ERROR, self.error[:MAX_ERROR_TEXT]),
        ]
        if self.topic is not None:
            pairs.append((HEADER_TOPIC, self.topic))
        if self.partition is not None:
            pairs.append((HEADER_PARTITION, str(self.partition)))
        if self.offset is not None:
            pairs.append((HEADER_OFFSET, str(self.offset)))
        return kept + [(name, value.encode()) for name, value in pairs]
