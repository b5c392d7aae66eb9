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
"""A dead letter whose original bytes do not fit in a record keeps at most this many of them."""

MAX_RECORD_BYTES = 1_000_000
"""Default record limit: librdkafka's ``message.max.bytes`` default, below a default topic's limit."""

RECORD_OVERHEAD = 1024
"""Bytes allowed for a record's framing and per-header lengths when sizing it; more than librdkafka
counts (it checks key + value + serialized headers + a few dozen bytes against ``message.max.bytes``),
so a record that passes :func:`record_size` is never refused by the producer set up with the limit
plus this much."""

_BODY_PREFIX = 200


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


def record_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """Upper bound of what the record counts against the producer's ``message.max.bytes``."""
    framing = sum(len(name) + len(data) + 10 for name, data in headers)
    return len(key or b"") + len(value or b"") + framing + RECORD_OVERHEAD


def fits(out: Out, limit: int) -> bool:
    """True when ``out`` can be produced under a record limit of ``limit`` bytes."""
    return record_size(out.key, out.value, out.headers) <= limit


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


def _dead_letter(
    topic: str,
    origin: Origin,
    reason: Reason,
    error: str,
    request_id: str | None,
    limit: int,
    extra: Headers | None = None,
    keep: int | None = None,
) -> Out:
    """A DLQ record of the original bytes; cut to a prefix when they (or ``keep``) say so.

    The value is cut to at most ``TOO_LARGE_KEEP`` bytes when the whole record would exceed ``limit``,
    or to ``keep`` bytes when given; the error text then starts by saying how much of the original it
    holds (first, so the header's length cap cannot cut it off), and the offset headers point at it.
    """
    key = request_id.encode() if request_id is not None else None
    value = origin.value or b""

    def build(data: bytes, text: str) -> Out:
        bad = BadRecord(data, STAGE, reason, text, key, origin.topic, origin.partition, origin.offset)
        return Out(topic, key, data, bad.headers() + (extra or []), reason.value)

    out = build(value, error)
    if keep is None and fits(out, limit):
        return out
    room = limit - record_size(key, b"", out.headers) - 100  # the note below lengthens the error text
    cut = max(0, min(TOO_LARGE_KEEP if keep is None else keep, room, len(value)))
    return build(value[:cut], f"[value: the first {cut} of {len(value)} bytes of the original] {error}")


def request_facts(request: Request) -> Headers:
    """The request's model and attributes, as on its ``llm.raw`` record.

    A dead letter's value is the request itself, but consumers of the DLQ group dead letters by
    these headers (the A/B job reads the arm from ``attributes``) without parsing each value.
    """
    return [(h.MODEL, request.model.encode()), (h.ATTRIBUTES, request.attributes)]


def failed_record(topic: str, origin: Origin, request: Request, failure: Failure, limit: int) -> Out:
    """A call that produced no reply: the original request bytes plus the reason and HTTP facts."""
    extra: Headers = [*request_facts(request), (h.ATTEMPTS, str(failure.attempts).encode())]
    if failure.status is not None:
        extra.append((h.HTTP_STATUS, str(failure.status).encode()))
    return _dead_letter(topic, origin, failure.reason, failure.error, request.request_id, limit, extra)


def too_large_record(topic: str, origin: Origin, request: Request, raw: Out, limit: int) -> Out:
    """A reply whose ``llm.raw`` record would exceed the record limit: a ``too_large`` dead letter.

    Like every connector dead letter its value is the original request (so it can be replayed, e.g.
    with a lower ``max_tokens``); the reply's call facts stay as headers and the error text gives the
    sizes and the start of the body. The body itself is not kept: it is what does not fit.
    """
    body = raw.value or b""
    size = record_size(raw.key, raw.value, raw.headers)
    start = body[:_BODY_PREFIX].decode("utf-8", "replace")
    error = (
        f"response body of {len(body)} bytes: its {raw.topic} record would take about {size} bytes, "
        f"over the record limit of {limit}; body starts: {start}"
    )
    return _dead_letter(topic, origin, Reason.TOO_LARGE, error, request.request_id, limit, raw.headers)


def rejected_record(topic: str, origin: Origin, rejected: Rejected, limit: int) -> Out:
    """An input record that is not a valid request.

    A too-large record keeps only its first ``TOO_LARGE_KEEP`` bytes: the whole of it would not fit in
    a Kafka record either, and the offset headers point at the original.
    """
    keep = TOO_LARGE_KEEP if rejected.reason is Reason.TOO_LARGE else None
    return _dead_letter(topic, origin, rejected.reason, rejected.error, rejected.request_id, limit, keep=keep)
