"""The GPU backend's host pieces, on every host: the pre-screen (duplicate keys) and row assembly."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_stage.synth import SynthConfig, bodies
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.contract.content import ContentValidator
from gpu_stage.transform.contract.extract import BODY_FIELDS, extract
from gpu_stage.transform.cudf.path import CudfPath
from gpu_stage.transform.cudf.rows import device_safe, has_duplicate_keys, key_tokens
from gpu_stage.transform.cudf.screen import MAX_DEPTH, screen_host
from gpu_stage.transform.stages import StageClock
from tests.vectors import load_vectors

LIMIT = 1 << 20


def repeats_a_key(value: bytes) -> bool:
    """Reference: whether any object repeats a key, read by the standard library's pair hook."""
    found = False

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        names = [name for name, _ in pairs]
        found |= len(names) != len(set(names))
        return dict(pairs)

    json.loads(value, object_pairs_hook=hook)
    return found


@pytest.mark.parametrize(
    ("value", "safe"),
    [
        (b'{"model":"a","model":"b"}', False),
        (b'{"choices":[{"message":{"content":"a","content":"b"}}]}', False),
        (b'{"usage":{"prompt_tokens":1,"prompt_tokens":2}}', False),
        (b'{"error":null,"id":"x","error":{"message":"m"}}', False),
        (b'{"a\\\\":1,"a\\\\":2}', False),
        (b'{"a":1,"a" :2}', False),
        (b'{"id":"a","choices":[{"message":{"tool_calls":[{"id":"t","index":0}]}}]}', True),
        (b'{"c":"{\\"a\\":1,\\"a\\":2}"}', True),
        (b'{"c":[{"a":1},{"a":2}]}', True),
        (b'{"c":":x","d":"\\\\"}', True),
        (b'{"a":1}}', False),
        (b'{"a":1e400}', False),
        (b'{"a":"\xff"}', False),
        (b'{"a":' + b"[" * 300 + b"]" * 300 + b"}", False),
        (b'{"a/b":1,"a\\/b":2}', False),
        (b'{"id": "a", "choices": ["x"]}', False),
        (b'{"choices": [{"a":1}, null]}', False),
        (b'{"choices":[{"message":{"tool_calls":[{"id":"t"},[]]}}]}', False),
        (b'{"choices":[],"x":["a",1]}', True),
        (b'{"usage": 5}', False),
        (b'{"usage":{"prompt_tokens_details":[]}}', False),
        (b'{"choices":[{"message":"hi"}]}', False),
        (b'{"choices":[{"message":{"tool_calls":[{"function":"f"}]}}]}', False),
        (b'{"usage":null,"choices":[{"message":{"tool_calls":[{"function":null}]}}]}', True),
        (b'{"choices":[{"message":{"tool_calls":[]}},{"a":[1,"b"]}]}', True),
    ],
)
def test_pre_screen_duplicate_keys(value: bytes, safe: bool) -> None:
    assert device_safe(value, LIMIT) is safe
    assert screen_host([value], LIMIT) == [safe]


@pytest.mark.parametrize(
    "value",
    [
        b'{"a":1,"b":2',
        b'{"a":[1}',
        b'{"a":1}{"b":2}',
        b'{"a":"x\\q"}',
        b'{"a":"\xe0\x80\x80"}',
        b'{"a":"\xed\xa0\x80"}',
        b'{"choices":[{"delta" : null}]}',
        b'{"a":' + b"{" * MAX_DEPTH + b"}" * MAX_DEPTH + b"}",
    ],
)
def test_device_screen_rejects(value: bytes) -> None:
    """Bodies the kernel sends to the slow lane (some the host screen rejects only through orjson)."""
    assert screen_host([value], LIMIT) == [False]


def test_device_screen_matches_the_host_screen() -> None:
    """The kernel is never more permissive than the host pre-screen, and stricter only on error bodies.

    It knows no paths: a ``"message"`` string inside an ``error`` object sends the body to the slow
    lane, where error bodies end anyway (the fast lane takes no body with an ``error`` key).
    """
    values = [v.value for v in load_vectors()] + bodies(600, SynthConfig(seed=7))
    for value, kernel in zip(values, screen_host(values, LIMIT), strict=True):
        host = device_safe(value, LIMIT)
        assert host or not kernel, value[:120]
        assert kernel or not host or b'"error"' in value, value[:120]


def test_vectors_with_repeated_keys_take_the_slow_lane() -> None:
    repeated = []
    for vector in load_vectors():
        try:
            dup = repeats_a_key(vector.value)
        except (ValueError, RecursionError):  # not JSON, or nested too deep for the reference reader
            continue
        if dup:
            repeated.append(vector.name)
            assert not device_safe(vector.value, LIMIT), vector.name
    assert "duplicate_keys_last_wins" in repeated


def test_synth_bodies_stay_on_the_device() -> None:
    """Generated bodies repeat names across objects (tool call ids) but never within one."""
    values = bodies(3000, SynthConfig())
    assert all(device_safe(v, LIMIT) for v in values if not repeats_a_key(v) and v.isascii())


_names = st.sampled_from(["id", "a", "content", "a\\\\", 'q\\"', "x:y", ":"])
_scalars = st.one_of(st.integers(-5, 5).map(str), st.sampled_from(['"s"', '":"', '"\\\\"', '"a\\":1"', "null", "true"]))


@st.composite
def _objects(draw: st.DrawFn, depth: int = 0) -> str:
    """JSON object text, keys drawn from a small set so repeats within one object are common."""
    members = []
    for _ in range(draw(st.integers(0, 4))):
        name = draw(_names)
        if depth < 3 and draw(st.booleans()):
            value = draw(_objects(depth + 1))
            if draw(st.booleans()):
                value = f"[{value},{draw(_objects(depth + 1))}]"
        else:
            value = draw(_scalars)
        members.append(f'"{name}":{value}')
    sep = draw(st.sampled_from([",", ", "]))
    return "{" + sep.join(members) + "}"


@settings(max_examples=400, deadline=None)
@given(_objects())
def test_duplicate_check_never_misses_a_repeat(text: str) -> None:
    value = text.encode()
    if repeats_a_key(value):
        assert has_duplicate_keys(value, orjson.loads(value))
        assert not device_safe(value, LIMIT)
        assert screen_host([value], LIMIT) == [False]
    assert key_tokens(value) >= key_tokens(orjson.dumps(orjson.loads(value)))


def test_assemble_builds_the_reference_rows() -> None:
    """Column-wise assembly of fast-lane values gives the CPU extraction's row tuples."""
    path = object.__new__(CudfPath)
    validator = ContentValidator(TransformSettings().record.content_schema)
    path._validator = validator  # no device here: only the host half is built
    expected = []
    for value in bodies(400, SynthConfig()):
        try:
            row = extract(orjson.loads(value), validator)
        except Exception:  # bad bodies are not fast rows
            continue
        values = dict(zip(BODY_FIELDS, row, strict=True))
        if values["num_choices"] <= 1 and not values["extra"] and values["metadata"] is None:
            expected.append(row)
    cols = {name: [r[k] for r in expected] for k, name in enumerate(BODY_FIELDS)}
    # the device gives the first choice's index; tool arguments re-parse to themselves
    cols["index"] = [c[0]["index"] if c else None for c in cols["choices"]]
    assert path._assemble(cols) == expected


def test_stage_clock_accumulates_and_resets() -> None:
    calls: list[int] = []
    clock = StageClock(lambda: calls.append(1))
    for _ in range(2):
        with clock.stage("read"):
            pass
    assert set(clock.seconds) == {"read"}
    assert len(calls) == 4
    clock.reset()
    assert clock.seconds == {}


def test_pre_screen_decides_every_vector() -> None:
    """No vector makes the pre-screen raise (deep nesting, bad bytes): it answers True or False."""
    for vector in load_vectors():
        assert device_safe(vector.value, LIMIT) in {True, False}, vector.name
