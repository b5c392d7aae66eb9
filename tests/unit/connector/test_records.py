"""Output records: sizing against the record limit and dead letters that must fit in one record."""

from __future__ import annotations

from connector import records
from connector.http import Failure, Reply
from connector.requests import Rejected, Request
from llmpipe.dlq import HEADER_ERROR, HEADER_REASON, Reason

LIMIT = 10_000
REQUEST = Request("r-1", "m", b'{"model":"m"}', b'{"user":"u"}')


def _origin(value: bytes) -> records.Origin:
    return records.Origin("requests", 0, 7, value)


def _raw(body: bytes) -> records.Out:
    return records.raw_record("llm.raw", "http://vllm/v1/chat/completions", REQUEST, Reply(200, body, 12, 1, 0))


def test_size_counts_key_value_headers_and_overhead() -> None:
    out = _raw(b"x" * 100)
    size = records.record_size(out.key, out.value, out.headers)
    assert size > 100 + len(b"r-1") + records.RECORD_OVERHEAD
    assert records.fits(out, size) and not records.fits(out, size - 1)


def test_reply_over_the_limit_becomes_too_large_dead_letter_with_the_request() -> None:
    raw = _raw(b'{"id":"chatcmpl-1","choices":[' + b"y" * LIMIT)
    assert not records.fits(raw, LIMIT)
    out = records.too_large_record("llm.dlq", _origin(b'{"request_id":"r-1"}'), REQUEST, raw, LIMIT)
    facts = dict(out.headers)
    assert out.topic == "llm.dlq" and out.key == b"r-1" and out.reason == "too_large"
    assert out.value == b'{"request_id":"r-1"}'
    assert facts[HEADER_REASON] == b"too_large" and facts["http.status"] == b"200"
    error = facts[HEADER_ERROR].decode()
    assert f"response body of {len(raw.value or b'')} bytes" in error and "chatcmpl-1" in error
    assert records.fits(out, LIMIT)


def test_dead_letter_whose_original_does_not_fit_keeps_a_prefix_and_says_so() -> None:
    original = b"z" * (3 * LIMIT)
    failure = Failure(Reason.HTTP_STATUS, "HTTP 400: bad", 1, 400)
    out = records.failed_record("llm.dlq", _origin(original), REQUEST, failure, LIMIT)
    assert records.fits(out, LIMIT)
    assert out.value and original.startswith(out.value) and len(out.value) < LIMIT
    error = dict(out.headers)[HEADER_ERROR].decode()
    assert error.startswith(f"[value: the first {len(out.value)} of {len(original)} bytes of the original]")
    assert error.endswith("HTTP 400: bad")


def test_dead_letter_that_fits_is_unchanged() -> None:
    failure = Failure(Reason.RETRIES_EXHAUSTED, "ReadTimeout", 4)
    out = records.failed_record("llm.dlq", _origin(b"line"), REQUEST, failure, LIMIT)
    assert out.value == b"line" and dict(out.headers)[HEADER_ERROR] == b"ReadTimeout"


def test_too_large_input_keeps_its_first_bytes() -> None:
    original = b"q" * (records.TOO_LARGE_KEEP * 2)
    rejected = Rejected(Reason.TOO_LARGE, "too big", "r-2")
    out = records.rejected_record("llm.dlq", _origin(original), rejected, records.MAX_RECORD_BYTES)
    assert out.value == original[: records.TOO_LARGE_KEEP]
    assert dict(out.headers)[HEADER_ERROR].decode().endswith("too big")


def test_call_dead_letters_carry_the_requests_model_and_attributes() -> None:
    """The A/B job reads the arm of a failed call from the attributes header, as on llm.raw records."""
    for failure in (Failure(Reason.HTTP_STATUS, "HTTP 400: bad", 1, 400), Failure(Reason.RETRIES_EXHAUSTED, "x", 4)):
        facts = dict(records.failed_record("llm.dlq", _origin(b"line"), REQUEST, failure, LIMIT).headers)
        assert facts["attributes"] == b'{"user":"u"}' and facts["model"] == b"m", failure
    raw = _raw(b"y" * LIMIT)
    facts = dict(records.too_large_record("llm.dlq", _origin(b"{}"), REQUEST, raw, LIMIT).headers)
    assert facts["attributes"] == b'{"user":"u"}' and facts["model"] == b"m"
