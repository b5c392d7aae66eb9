from __future__ import annotations

import json

import pytest

from connector.requests import BodyOptions, Rejected, Request, parse, response_format
from llmpipe.dlq import Reason

OPTS = BodyOptions(model="default-model", max_bytes=2000)


def test_valid_request_builds_body() -> None:
    line = json.dumps(
        {
            "request_id": "r1",
            "messages": [{"role": "user", "content": "hi"}],
            "params": {"temperature": 0.2, "max_tokens": 5},
            "attributes": {"arm": "b"},
        }
    ).encode()
    req = parse(line, OPTS)
    assert isinstance(req, Request)
    assert req.request_id == "r1" and req.model == "default-model"
    assert json.loads(req.body) == {
        "model": "default-model",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.2,
        "max_tokens": 5,
    }
    assert json.loads(req.attributes) == {"arm": "b"}


def test_schema_and_stream_options() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    opts = BodyOptions("m", response_format(schema, "content"), stream=True)
    req = parse(b'{"request_id":"x","messages":[{"role":"user","content":"q"}],"model":"other"}', opts)
    assert isinstance(req, Request) and req.model == "other"
    body = json.loads(req.body)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "content", "schema": schema, "strict": True},
    }
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"{not json", Reason.INVALID_JSON),
        (b"\xff\xfe{}", Reason.INVALID_UTF8),
        (b"[1, 2]", Reason.NOT_AN_OBJECT),
        (b'{"messages": [{"role": "user", "content": "x"}]}', Reason.MISSING_FIELD),
        (b'{"request_id": 7, "messages": []}', Reason.WRONG_TYPE),
        (b'{"request_id": "a"}', Reason.MISSING_FIELD),
        (b'{"request_id": "a", "messages": "hi"}', Reason.WRONG_TYPE),
        (b'{"request_id": "a", "messages": [{}], "attributes": {"k": 1}}', Reason.WRONG_TYPE),
        (b'{"request_id": "a", "messages": [{}], "pad": "' + b"x" * 3000 + b'"}', Reason.TOO_LARGE),
    ],
)
def test_bad_lines_are_rejected_with_reason(line: bytes, reason: Reason) -> None:
    out = parse(line, OPTS)
    assert isinstance(out, Rejected) and out.reason is reason
