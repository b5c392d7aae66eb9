"""The Confluent wire format and the registry client (against httpx's MockTransport): no registry, no broker."""

from __future__ import annotations

import io
import json
import logging
import struct
from typing import Any

import fastavro
import httpx
import numpy as np
import pytest

from llmpipe.errors import ConfigError, SerializationError, SourceError
from llmpipe.record import TypedRecord
from llmpipe.registry import (
    CONTENT_TYPE,
    MAGIC_BYTE,
    PREFIX_BYTES,
    RegistryAddress,
    RegistryClient,
    RegistryRefused,
    RegistryUnreachable,
    frame,
    framed,
    redact,
    register_until_done,
    registry_url,
    subject_for,
    unframe,
    wire_prefix,
)
from llmpipe.settings import Refused

SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}, {"name": "s", "type": "string"}]}


def datum(record: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


# --- wire format ---------------------------------------------------------------------------------


def test_prefix_is_magic_byte_then_big_endian_id() -> None:
    assert wire_prefix(1) == b"\x00\x00\x00\x00\x01"
    assert wire_prefix(0x01020304) == b"\x00\x01\x02\x03\x04"
    assert len(wire_prefix(2**31 - 1)) == PREFIX_BYTES


@pytest.mark.parametrize("bad", [-1, 2**31, 2**32])
def test_prefix_refuses_ids_a_registry_cannot_have(bad: int) -> None:
    with pytest.raises(SerializationError):
        wire_prefix(bad)


def test_frame_and_unframe_round_trip_an_avro_datum() -> None:
    record = {"a": -7, "s": "héllo"}
    value = frame(4242, datum(record))
    assert value[0] == MAGIC_BYTE
    assert struct.unpack(">I", value[1:5]) == (4242,)
    schema_id, body = unframe(value)
    assert schema_id == 4242
    assert fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(SCHEMA), None) == record


@pytest.mark.parametrize("value", [b"", b"\x00\x00\x00", b"\x01\x00\x00\x00\x01abc"])
def test_unframe_refuses_what_is_not_confluent_framed(value: bytes) -> None:
    with pytest.raises(SerializationError, match="Confluent wire format"):
        unframe(value)


@pytest.mark.parametrize("as_view", [False, True])
def test_framed_rows_are_each_datum_behind_the_prefix(as_view: bool) -> None:
    rows = [datum({"a": i, "s": "x" * i}) for i in range(50)]
    buf = b"".join(rows)
    offsets = np.cumsum([0, *map(len, rows)], dtype=np.int64)
    prefix = wire_prefix(9)
    source = memoryview(bytearray(buf)) if as_view else buf
    values = list(framed(prefix, source, offsets))
    assert values == [prefix + row for row in rows]
    assert all(type(v) is bytes for v in values)  # what the producer takes
    assert [unframe(v)[1] for v in values] == rows


def test_framed_empty_batch() -> None:
    assert list(framed(wire_prefix(1), b"", np.zeros(1, dtype=np.int64))) == []


def test_framed_typed_record_datums_decode_with_the_typed_schema() -> None:
    record = TypedRecord.from_file()
    schema = record.parsed_avro
    rows = [_typed_row(record, i) for i in range(3)]
    encoded = []
    for row in rows:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, row)
        encoded.append(out.getvalue())
    offsets = np.cumsum([0, *map(len, encoded)], dtype=np.int64)
    for row, value in zip(rows, framed(wire_prefix(3), b"".join(encoded), offsets), strict=True):
        schema_id, body = unframe(value)
        assert schema_id == 3
        assert fastavro.schemaless_reader(io.BytesIO(body), schema, None)["request_id"] == row["request_id"]


def _typed_row(record: TypedRecord, i: int) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys((f.name for f in record.row.fields), None)
    row["request_id"] = f"req-{i}"
    return row


# --- subjects, URLs, credentials -----------------------------------------------------------------


def test_subject_is_the_topic_name_strategy_value_subject() -> None:
    assert subject_for("llm.typed.0a1b2c3d") == "llm.typed.0a1b2c3d-value"


@pytest.mark.parametrize("url", ["http://127.0.0.1:8081", "https://registry.example/apis/ccompat/v7/",
                                 "http://user:pw@host:1/x"])
def test_registry_url_accepts_http_and_https(url: str) -> None:
    assert registry_url(url) == url.rstrip("/")


@pytest.mark.parametrize("url", ["", "registry:8081", "ftp://host", "http://", "http://host:notaport", "file:///x"])
def test_registry_url_refuses_anything_else(url: str) -> None:
    with pytest.raises(Refused, match="http:// or https:// URL"):
        registry_url(url)


def test_a_refused_url_never_echoes_its_password() -> None:
    with pytest.raises(Refused) as caught:
        registry_url("ftp://alice:s3cret@host")
    assert "s3cret" not in str(caught.value)


def test_user_info_becomes_credentials_and_is_redacted() -> None:
    address = RegistryAddress.parse("https://alice:p%40ss@reg.example:8443/apis/ccompat/v7/")
    assert address == RegistryAddress("https://reg.example:8443/apis/ccompat/v7", "alice", "p@ss")
    assert "p@ss" not in repr(address)
    assert redact("https://alice:p%40ss@reg.example/x") == "https://alice:***@reg.example/x"
    assert redact("http://reg:1/x") == "http://reg:1/x"


# --- the client ----------------------------------------------------------------------------------


class Recorder:
    """A MockTransport handler that answers from a list and keeps the requests."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def client(handler: Recorder, url: str = "http://reg:8081/apis/ccompat/v6") -> RegistryClient:
    return RegistryClient(url, transport=httpx.MockTransport(handler))


def test_register_posts_the_schema_as_a_json_string_under_the_subject() -> None:
    handler = Recorder(httpx.Response(200, json={"id": 17}))
    with client(handler) as registry:
        assert registry.register("llm.typed.x-value", SCHEMA) == 17
    (request,) = handler.requests
    assert request.method == "POST"
    assert request.url.path == "/apis/ccompat/v6/subjects/llm.typed.x-value/versions"
    assert request.headers["content-type"] == CONTENT_TYPE
    body = json.loads(request.content)
    assert body["schemaType"] == "AVRO"
    assert json.loads(body["schema"]) == SCHEMA
    assert "authorization" not in request.headers


def test_credentials_in_the_url_go_as_basic_auth() -> None:
    handler = Recorder(httpx.Response(200, json={"id": 1}))
    with client(handler, "https://alice:s3cret@reg/api") as registry:
        registry.register("t-value", SCHEMA)
    (request,) = handler.requests
    assert request.url.host == "reg" and request.url.userinfo == b""
    assert request.headers["authorization"].startswith("Basic ")


def test_an_incompatible_schema_is_refused_naming_the_subject_without_the_password() -> None:
    answer = httpx.Response(409, json={"error_code": 409, "message": "Schema being registered is incompatible"})
    with client(Recorder(answer), "http://u:s3cret@reg/api") as registry, \
            pytest.raises(RegistryRefused) as caught:
        registry.register("llm.typed.x-value", SCHEMA)
    text = str(caught.value)
    assert "llm.typed.x-value" in text and "incompatible" in text and "409" in text
    assert "s3cret" not in text
    assert isinstance(caught.value, ConfigError)


@pytest.mark.parametrize("answer", [httpx.Response(503, text="down"), httpx.ConnectError("refused"),
                                    httpx.ReadTimeout("slow")])
def test_no_answer_or_a_server_error_is_unreachable(answer: httpx.Response | Exception) -> None:
    with client(Recorder(answer)) as registry, pytest.raises(RegistryUnreachable) as caught:
        registry.register("t-value", SCHEMA)
    assert isinstance(caught.value, SourceError)


def test_an_answer_without_an_id_is_refused() -> None:
    with client(Recorder(httpx.Response(200, json={"version": 1}))) as registry, pytest.raises(RegistryRefused):
        registry.register("t-value", SCHEMA)


def test_schema_by_id() -> None:
    handler = Recorder(httpx.Response(200, json={"schema": json.dumps(SCHEMA)}))
    with client(handler) as registry:
        assert registry.schema(5) == SCHEMA
    assert handler.requests[0].url.path == "/apis/ccompat/v6/schemas/ids/5"


# --- riding out an unreachable registry ----------------------------------------------------------


def test_registration_waits_for_the_registry_with_bounded_logging(caplog: pytest.LogCaptureFixture) -> None:
    down = httpx.ConnectError("connection refused")
    handler = Recorder(down, down, down, down, down, down, httpx.Response(200, json={"id": 8}))
    slept: list[float] = []
    with client(handler, "http://u:s3cret@reg/api") as registry, caplog.at_level(logging.INFO, "llmpipe.registry"):
        schema_id = register_until_done(registry, "t-value", SCHEMA, sleep=slept.append, max_backoff_s=1.0)
    assert schema_id == 8
    assert len(handler.requests) == 7
    assert slept == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0]  # doubling, capped
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one line when it starts, not one per attempt
    assert "retrying" in warnings[0].getMessage()
    assert any("answered after" in r.getMessage() for r in caplog.records)
    assert "s3cret" not in caplog.text


def test_registration_logs_again_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    down = httpx.ConnectError("connection refused")
    handler = Recorder(down, down, down, httpx.Response(200, json={"id": 2}))
    with client(handler) as registry, caplog.at_level(logging.WARNING, "llmpipe.registry"):
        register_until_done(registry, "t-value", SCHEMA, sleep=lambda _s: None, log_every_s=0.0)
    assert [r.getMessage().startswith("schema registry still unreachable") for r in caplog.records] == [
        False, True, True]


def test_a_refusal_is_not_retried() -> None:
    handler = Recorder(httpx.Response(422, json={"error_code": 42201, "message": "Invalid schema"}))
    with client(handler) as registry, pytest.raises(RegistryRefused, match="Invalid schema"):
        register_until_done(registry, "t-value", SCHEMA, sleep=lambda _s: pytest.fail("slept"))
    assert len(handler.requests) == 1


def test_stopping_ends_the_wait_without_an_id() -> None:
    handler = Recorder(httpx.ConnectError("refused"))
    calls = iter([False, False, True])
    with client(handler) as registry:
        assert register_until_done(registry, "t", SCHEMA, stopping=lambda: next(calls), sleep=lambda _s: None) is None
    assert len(handler.requests) == 2
