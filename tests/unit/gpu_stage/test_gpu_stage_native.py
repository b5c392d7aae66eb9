"""The native core against the reference: same bytes, same dead letters, on generated batches.

The shared vectors and the real corpus run through both backends in their own modules; here
hypothesis builds bodies around the vLLM shape with every field's type varied, byte-level damage,
odd keys and headers, and content for several content schemas, and the two backends must agree on
every output byte and every dead letter's reason and text.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.backends import by_name, choose
from gpu_stage.transform.batch import ParseResult, RawBatch
from gpu_stage.transform.contract.reference import ReferenceBackend
from gpu_stage.transform.native import NativeBackend
from llmpipe.errors import ConfigError
from llmpipe.record import TypedRecord

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
CREATED = st.one_of(
    st.integers(min_value=-10, max_value=2**64),
    st.floats(allow_nan=False),
    st.sampled_from(
        [
            "2025-03-13T02:06:06Z",
            "2025-03-13T02:06:06.123456+05:30",
            "2025-02-29T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "2025-03-13T02:06:06+24:00",
            "2025-03-13T02:06:06",
            "0000-01-01T00:00:00Z",
            "2025-13-01T00:00:00Z",
        ]
    ),
    JSON_VALUES,
)
CONTENT_OBJECTS = st.fixed_dictionaries(
    {},
    optional={
        "sentiment": st.sampled_from(["positive", "neutral", "negative", "other"]) | SCALARS,
        "score": st.floats(min_value=-1, max_value=2) | st.integers(-2, 2) | SCALARS,
        "risk_level": st.sampled_from(["low", "medium", "high"]) | SCALARS,
        "topics": st.lists(st.text(max_size=5) | SCALARS, max_size=3) | SCALARS,
        "needs_review": st.booleans() | SCALARS,
        "count": st.integers(-3, 3) | st.floats(-3, 3) | SCALARS,
        "flags": st.lists(st.booleans() | st.integers(0, 1), max_size=3) | SCALARS,
        "extra_key": SCALARS,
    },
)


@st.composite
def content_texts(draw: st.DrawFn) -> Any:
    """Prose, JSON for the content schema (fenced or not, sometimes broken), or a non-string."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.text(max_size=20))
    text = json.dumps(draw(CONTENT_OBJECTS), ensure_ascii=draw(st.booleans()))
    if kind == 1:
        return f"```{draw(st.sampled_from(['json', 'JSON', '']))}\n{text}\n```"
    if kind == 2:
        return text[: draw(st.integers(0, len(text)))]
    if kind == 3:
        return draw(SCALARS)
    return draw(st.sampled_from(["", " \n", "\t"])) + text


@st.composite
def choices(draw: st.DrawFn) -> Any:
    """One choice: message, delta or text, with tool calls, reasoning and stop reasons varied."""
    choice: dict[str, Any] = {
        "index": draw(st.integers(-(2**32), 2**32) | SCALARS),
        "finish_reason": draw(st.sampled_from(["stop", "length", "abort", None]) | SCALARS),
    }
    holder = draw(st.sampled_from(["message", "delta", "text", "none"]))
    if holder == "text":
        choice["text"] = draw(content_texts())
    elif holder != "none":
        message: dict[str, Any] = {"role": "assistant", "content": draw(content_texts())}
        for key in draw(st.sets(st.sampled_from(["reasoning", "reasoning_content", "tool_calls"]))):
            if key == "tool_calls":
                arguments = draw(
                    st.one_of(
                        st.just('{"city": "Paris", "n": 1.5e-7}'),
                        st.text(max_size=10),
                        JSON_VALUES,
                        st.builds(json.dumps, JSON_VALUES),
                    )
                )
                call = {"id": "c", "type": "function", "function": {"name": draw(SCALARS), "arguments": arguments}}
                message[key] = draw(st.sampled_from([[], [call], call, None]))
            else:
                message[key] = draw(SCALARS)
        choice[holder] = draw(st.just(message) | SCALARS) if draw(st.integers(0, 9)) == 0 else message
    if draw(st.booleans()):
        choice["stop_reason"] = draw(SCALARS)
    return choice


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A body around the vLLM shape, serialized with varied spacing, sometimes damaged."""
    body: dict[str, Any] = {
        "id": draw(st.just("chatcmpl-1") | SCALARS) if draw(st.integers(0, 7)) == 0 else "chatcmpl-1",
        "object": draw(st.sampled_from(["chat.completion", "chat.completion.chunk", "text_completion", "error"])),
        "created": draw(CREATED) if draw(st.integers(0, 3)) == 0 else 1741831566,
        "model": draw(st.just("m") | SCALARS),
        "choices": draw(st.lists(choices(), max_size=3)),
    }
    if draw(st.booleans()):
        body["usage"] = {
            "prompt_tokens": draw(st.integers(0, 2**64) | SCALARS),
            "completion_tokens": 3,
            "total_tokens": draw(st.integers(0, 9)),
            "prompt_tokens_details": draw(st.none() | st.just({"cached_tokens": 2}) | JSON_VALUES),
        }
    for key in draw(st.sets(st.sampled_from(["metadata", "system_fingerprint", "service_tier", "trace_id",
                                             "error", "prompt_logprobs", "kv_transfer_params", "id"]))):
        body[key] = draw(JSON_VALUES)
    for key in draw(st.sets(st.sampled_from(["id", "object", "created", "choices"]), max_size=1)):
        del body[key]
    text = json.dumps(body, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 1])))
    raw = text.encode()
    damage = draw(st.integers(0, 11))
    if damage == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif damage == 1:
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(min_size=1, max_size=2)) + raw[at:]
    return raw


HEADERS = st.lists(
    st.tuples(
        st.sampled_from(["latency.ms", "attributes", "status"]),
        st.one_of(
            st.sampled_from([b"12", b"0012", b"1234567890123456789", b"", b"1.5", b'{"arm":"a","n":1}', b"[1]"]),
            st.builds(lambda v: json.dumps(v).encode(), JSON_VALUES),
            st.binary(max_size=4),
        ),
    ),
    max_size=3,
)


@st.composite
def batches(draw: st.DrawFn) -> RawBatch:
    values = draw(st.lists(bodies(), min_size=1, max_size=6))
    n = len(values)
    return RawBatch(
        values=values,
        keys=draw(st.lists(st.none() | st.binary(max_size=6), min_size=n, max_size=n)),
        headers=draw(st.lists(HEADERS, min_size=n, max_size=n)),
        topic="llm.raw",
        partitions=draw(st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n)),
        offsets=np.arange(n, dtype=np.int64) * draw(st.integers(1, 2**40)),
        timestamps_ms=draw(st.lists(st.integers(-1, 2**62), min_size=n, max_size=n)),
    )


CONTENT_SCHEMAS = {
    "default": None,
    "open_integers": {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": -1.5, "maximum": 2, "enum": [0, 1, 2, True, 1.0]},
            "flags": {"type": "array", "items": {"type": "boolean"}},
            "score": {"type": "number", "enum": [0, 0.5, 1]},
            "sentiment": {"type": "string"},
        },
        "required": ["count"],
    },
}


def _settings(name: str) -> TransformSettings:
    schema = CONTENT_SCHEMAS[name]
    record = TypedRecord.from_file() if schema is None else TypedRecord(schema)
    return TransformSettings(record=record, max_record_bytes=400)


PAIRS = {name: (ReferenceBackend(_settings(name)), NativeBackend(_settings(name))) for name in CONTENT_SCHEMAS}


def _assert_same(reference: ParseResult, native: ParseResult) -> None:
    assert native.encoded.rows.tolist() == reference.encoded.rows.tolist()
    assert native.encoded.offsets.tolist() == reference.encoded.offsets.tolist()
    assert native.encoded.buf == reference.encoded.buf
    assert native.encoded.keys == reference.encoded.keys
    assert native.bad == reference.bad


@pytest.mark.parametrize("schema", sorted(CONTENT_SCHEMAS))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=batches())
def test_native_equals_reference(schema: str, batch: RawBatch) -> None:
    reference, native = PAIRS[schema]
    _assert_same(reference.parse(batch), native.parse(batch))


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, key=st.text(max_size=8))
def test_values_copied_as_json_text_are_spelled_alike(value: Any, key: str) -> None:
    body = {"id": "x", "object": "chat.completion", "created": 1, "choices": [], key: value, "metadata": {"k": value}}
    reference, native = PAIRS["default"]
    batch = RawBatch.of_values([json.dumps(body).encode()])
    _assert_same(reference.parse(batch), native.parse(batch))


@settings(max_examples=300, deadline=None)
@given(x=st.floats(allow_nan=False, allow_infinity=False))
def test_doubles_survive_both_ways(x: float) -> None:
    content = json.dumps({"sentiment": "neutral", "score": x, "risk_level": "low"})
    body = {"id": "x", "object": "chat.completion", "created": 1, "extra_number": x,
            "choices": [{"index": 0, "message": {"content": content}}]}  # fmt: skip
    reference, native = PAIRS["default"]
    batch = RawBatch.of_values([json.dumps(body).encode()])
    _assert_same(reference.parse(batch), native.parse(batch))


def test_deep_and_large_bodies_match() -> None:
    deep = b'{"id":"x","object":"chat.completion","created":1,"choices":[],"d":' + b"[" * 300 + b"]" * 300 + b"}"
    too_deep = b"[" * 1025 + b"]" * 1025
    many_keys = json.dumps({f"k{i % 500}": i for i in range(2000)} | {"id": "x"}).encode()
    big = (b'{"id":"x","object":"chat.completion","created":18446744073709551615,"choices":[]}',
           b'{"id":"x","object":"chat.completion","created":1,"choices":[{"index":9223372036854775808,'
           b'"stop_reason":18446744073709551615}]}',
           b'{"id":"x","object":"chat.completion","created":1,"choices":[{"stop_reason":18446744073709551615}]}')
    values = [deep, too_deep, many_keys, b"\xef\xbb\xbf{}", b'"\\ud800"', b"1e400", *big]
    wide = TransformSettings(max_record_bytes=1 << 20)
    batch = RawBatch.of_values(values)
    _assert_same(ReferenceBackend(wide).parse(batch), NativeBackend(wide).parse(batch))


def test_unsupported_content_schema_is_a_config_error() -> None:
    schema = {"type": "object", "properties": {"when": {"type": "string", "minimum": 3}}}
    with pytest.raises(ConfigError):
        NativeBackend(TransformSettings(record=TypedRecord(schema)))
    with pytest.raises(ConfigError):
        ReferenceBackend(TransformSettings(record=TypedRecord(schema)))


def test_choose_picks_the_native_core(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    assert isinstance(choose("cpu", TransformSettings(), pool_bytes=1 << 20), NativeBackend)
    assert isinstance(choose("reference", TransformSettings(), pool_bytes=1 << 20), ReferenceBackend)
    auto = choose("auto", TransformSettings(), pool_bytes=1 << 20)
    assert auto.name in {"gpu", "cpu"}
    assert any("backend:" in r.getMessage() for r in caplog.records)
    assert isinstance(by_name("cpu", TransformSettings(), pool_bytes=1 << 20), NativeBackend)
    with pytest.raises(ConfigError, match="unknown backend"):
        by_name("fast", TransformSettings(), pool_bytes=1 << 20)


def test_threads_parse_at_once_with_the_same_result() -> None:
    """The core reads the batch without the GIL; concurrent calls on one backend stay independent."""
    from concurrent.futures import ThreadPoolExecutor

    from gpu_stage import synth

    backend = NativeBackend()
    batches = [synth.batch(synth.bodies(3000), first_offset=i * 3000) for i in range(4)]
    alone = [backend.parse(b) for b in batches]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(backend.parse, batches * 3))
    for i, result in enumerate(together):
        _assert_same(alone[i % len(batches)], result)
