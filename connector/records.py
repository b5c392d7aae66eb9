"""Build the output records: ``llm.raw`` for replies, ``llm.dlq`` for rejected input and failed calls."""

from __future__ import annotations

from dataclasses import dataclass

from connector.http import Failure, Reply
from connector.requests import STAGE, Rejected, Request
from llmpipe import headers as h
from llmpipe.dlq import BadRecord, Reason

TTFT_MS = "ttft.ms"
"""Time to first token in milliseconds (streaming capture only), ASCII decimal."""

Headers = list[tuple[str, bytes]]
TOO_LARGE_KEEP = 64 * 1024


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an input record came from, for DLQ headers (a file's path counts as its topic)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Out:
    """One record to produce in the transaction that commits its input position."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    reason: str | None = None


def raw_record(topic: str, endpoint: str, request: Request, reply: Reply) -> Out:
    """The body exactly as received, keyed by request_id, with the call's facts as headers."""
    pairs: Headers = [
        (h.HTTP_STATUS, str(reply.status).encode()),
        (h.LATENCY_MS, str(reply.latency_ms).encode()),
        (h.ATTEMPTS, str(reply.attempts).encode()),
        (h.ENDPOINT, endpoint.encode()),
        (h.MODEL, request.model.encode()),
        (h.RECEIVED_AT_MS, str(reply.received_at_ms).encode()),
        (h.ATTRIBUTES, request.attributes),
    ]
    if reply.ttft_ms is not None:
        pairs.append((TTFT_MS, str(reply.ttft_ms).encode()))
    return Out(topic, request.request_id.encode(), reply.body, pairs)


def _dlq(topic: str, origin: Origin, reason: Reason, error: str, request_id: str | None) -> BadRecord:
    key = request_id.encode() if request_id is not None else None
    return BadRecord(origin.value or b"", STAGE, reason, error, key, origin.topic, origin.partition, origin.offset)


def failed_record(topic: str, origin: Origin, request: Request, failure: Failure) -> Out:
    """A call that produced no reply: the original request bytes plus the reason and HTTP facts."""
    bad = _dlq(topic, origin, failure.reason, failure.error, request.request_id)
    extra: Headers = [(h.ATTEMPTS, str(failure.attempts).encode())]
    if failure.status is not None:
        extra.append((h.HTTP_STATUS, str(failure.status).encode()))
    return Out(topic, bad.key, bad.raw, bad.headers() + extra, failure.reason.value)


def rejected_record(topic: str, origin: Origin, rejected: Rejected) -> Out:
    """An input record that is not a valid request.

    A too-large record keeps only its first ``TOO_LARGE_KEEP`` bytes: the whole of it would not fit in
    a Kafka record either, and the offset headers point at the original.
    """
    if rejected.reason is Reason.TOO_LARGE and origin.value is not None:
        origin = Origin(origin.topic, origin.partition, origin.offset, origin.value[:TOO_LARGE_KEEP])
    bad = _dlq(topic, origin, rejected.reason, rejected.error, rejected.request_id)
    return Out(topic, bad.key, bad.raw, bad.headers(), rejected.reason.value)
