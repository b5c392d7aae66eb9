"""The device lane's strict JSON verdict against the native core's reader, and the dead letters it writes.

Bodies the lane's subset does not take are checked strictly (:func:`lane_json.body_verdict`): when
they are certainly not UTF-8, not JSON or not an object, the lane writes that dead letter itself, and
content that is not JSON gets its ``invalid_json`` error there too. A wrong verdict would turn a
good row into a dead letter, so the verdicts are held to the native core's on hand-picked edge
cases and on generated texts, and whole batches of such bodies go through the lane (compiled for the
CPU) and the native core with the same bytes and dead letters out.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba")

from test_gpu_stage_lane import WIDE_PAIR, _chat, _run
from test_lane_strings import MARKERS

from gpu_stage import synth
from gpu_stage.transform.device import strict as lane_json
from gpu_stage.transform.device.kernels import compile_lane
from gpu_stage.transform.device.scan import REFUSED

V = lane_json
MARKS = [(compile_lane(target), getattr(compile_lane(target), name)) for target, name in MARKERS.items()]
"""Each build with its strings pass: the verdict on a body with its marks must be the one without."""
REASON_VERDICT = {"invalid_utf8": V.V_INVALID_UTF8, "invalid_json": V.V_INVALID_JSON, "not_an_object": V.V_NOT_OBJECT}

# Bodies with the verdict the lane must reach on each (V_UNKNOWN: a valid object, or one it cannot tell).
EDGE_BODIES: dict[bytes, int] = {
    b"": V.V_INVALID_JSON,
    b" \r\n\t": V.V_INVALID_JSON,
    b'data: {"id": "x"}': V.V_INVALID_JSON,
    b'{"id": "x"}\n\ndata: [DONE]': V.V_INVALID_JSON,
    b'{"id": "x",}': V.V_INVALID_JSON,
    b'{"id": "x"': V.V_INVALID_JSON,
    b'{"a": NaN}': V.V_INVALID_JSON,
    b'{"a": -Infinity}': V.V_INVALID_JSON,
    b'{"a": 01}': V.V_INVALID_JSON,
    b'{"a": -01.5}': V.V_INVALID_JSON,
    b'{"a": 1.}': V.V_INVALID_JSON,
    b'{"a": .5}': V.V_INVALID_JSON,
    b'{"a": 1e}': V.V_INVALID_JSON,
    b'{"a": +1}': V.V_INVALID_JSON,
    b'{"a": -}': V.V_INVALID_JSON,
    b'{"a": tru}': V.V_INVALID_JSON,
    b'{"a": "\\ud800"}': V.V_INVALID_JSON,
    b'{"a": "\\udc00\\ud800"}': V.V_INVALID_JSON,
    b'{"a": "\\ud800\\u0041"}': V.V_INVALID_JSON,
    b'{"a": "\\ud800\\n"}': V.V_INVALID_JSON,
    b'{"a": "\\u12g4"}': V.V_INVALID_JSON,
    b'{"a": "\\u12"}': V.V_INVALID_JSON,
    b'{"a": "\\q"}': V.V_INVALID_JSON,
    b'{"a": "tab\there"}': V.V_INVALID_JSON,
    b"{'a': 1}": V.V_INVALID_JSON,
    b'{"a" 1}': V.V_INVALID_JSON,
    b'{"a": 1 "b": 2}': V.V_INVALID_JSON,
    b'{"a": [1, 2}': V.V_INVALID_JSON,
    b'{"a": [1, 2,]}': V.V_INVALID_JSON,
    b'{"a": {}}}': V.V_INVALID_JSON,
    b'{"a": 1e400, "b": }': V.V_INVALID_JSON,  # not JSON whatever the number
    b"\xef\xbb\xbf{}": V.V_INVALID_JSON,  # a byte order mark is not JSON whitespace
    b'{"a": "\xff"}': V.V_INVALID_UTF8,
    b'{"a": "\xc0\xaf"}': V.V_INVALID_UTF8,  # overlong
    b'{"a": "\xed\xa0\x80"}': V.V_INVALID_UTF8,  # a surrogate spelled in UTF-8
    b'{"a": "\xf4\x90\x80\x80"}': V.V_INVALID_UTF8,  # above U+10FFFF
    b'{"a": "\xe6\xb1"}': V.V_INVALID_UTF8,  # cut
    b"\xff not json either": V.V_INVALID_UTF8,
    b"[]": V.V_NOT_OBJECT,
    b' ["\\u00e9", 1.5e300, -0, {"k": [true, false, null]}] ': V.V_NOT_OBJECT,
    b'"a string"': V.V_NOT_OBJECT,
    b'"\\ud83d\\ude00"': V.V_NOT_OBJECT,
    b"123": V.V_NOT_OBJECT,
    b"-0.0e-999999999999": V.V_NOT_OBJECT,
    b"null": V.V_NOT_OBJECT,
    b"[" * 62 + b"]" * 62: V.V_NOT_OBJECT,
    # valid objects and what the lane cannot tell: the native core decides
    b'{"a": "\\u00e9\\ud83d\\ude00\\/"}': V.V_UNKNOWN,
    b'{"a": 1, "a": 2}': V.V_UNKNOWN,
    b"{}": V.V_UNKNOWN,
    b'{"a": 1.7976931348623157e308}': V.V_UNKNOWN,
    b"[1e400]": V.V_UNKNOWN,  # overflows: the native core rejects it, the lane cannot tell
    b"[" + b"9" * 400 + b"]": V.V_UNKNOWN,
    b"[0.0000000001e309]": V.V_UNKNOWN,
    b"[" * 63 + b"]" * 63: V.V_UNKNOWN,  # deeper than the lane's stack
    b"[" * 63 + b"]" * 62: V.V_UNKNOWN,
}


def _verdict(body: bytes) -> int:
    """The verdict read byte by byte, after checking that each build's string marks lead to the same one."""
    b = np.frombuffer(body + b"#", dtype=np.uint8)  # a byte past the end that must not be read
    verdict = int(lane_json.body_verdict(b, b[:0], 0, len(body)))
    for build, mark in MARKS:
        marks = np.full(len(b), REFUSED, dtype=np.uint16)  # stale entries that are no marks
        mark(b, marks, np.zeros(len(b), dtype=np.uint8), 0, len(body))
        assert int(build.body_verdict(b, marks, 0, len(body))) == verdict, (build, body)
    return verdict


def _native_verdicts(bodies: list[bytes]) -> list[int]:
    """What the native core made of each body, as a verdict (V_UNKNOWN for every object)."""
    result = WIDE_PAIR[1].parse(synth.batch(bodies))
    verdicts = [V.V_UNKNOWN] * len(bodies)
    for bad in result.bad:
        verdicts[bad.offset] = REASON_VERDICT.get(bad.reason.value, V.V_UNKNOWN)
    return verdicts


@pytest.mark.parametrize("body", list(EDGE_BODIES), ids=range(len(EDGE_BODIES)))
def test_edge_verdicts(body: bytes) -> None:
    assert _verdict(body) == EDGE_BODIES[body]


def test_edge_verdicts_are_the_native_cores_where_certain() -> None:
    bodies = list(EDGE_BODIES)
    for body, native in zip(bodies, _native_verdicts(bodies), strict=True):
        if EDGE_BODIES[body] != V.V_UNKNOWN:
            assert native == EDGE_BODIES[body], body
    assert _native_verdicts([b"[1e400]", b"[" * 63 + b"]" * 63]) == [V.V_INVALID_JSON, V.V_NOT_OBJECT]


def test_edge_bodies_through_the_lane_and_the_native_core() -> None:
    lane, native = WIDE_PAIR
    bodies = [*EDGE_BODIES, _chat("hello")]
    taken, good = _run(lane, native, synth.batch(bodies))
    assert good == 1
    assert taken == 1 + sum(v != V.V_UNKNOWN for v in EDGE_BODIES.values())


def test_integers_too_long_for_a_double_are_the_native_cores_wherever_the_lane_meets_them() -> None:
    """The native core reads an integer beyond 64 bits as a double and rejects one that overflows it."""
    longest, over = "9" * 308, "1" + "0" * 308
    values = [
        b'{"error": 1, "x": ' + over.encode() + b"}",
        b'{"error": 1, "x": ' + longest.encode() + b"}",
        _chat("[" + over + "]"),
        _chat("[" + longest + "]"),
        _chat('{"sentiment": "neutral", "z": ' + over + "}"),
    ]
    taken, _ = _run(*WIDE_PAIR, synth.batch(values))
    assert taken == 2  # the error body and the array content whose integer fits a double


# Pieces of JSON-like text: grammar tokens, escapes good and bad, numbers near every rule, bytes
# that are not UTF-8; joined at random they make texts that are JSON now and then, and mostly not.
PIECES = [
    "{", "}", "[", "]", ",", ":", " ", "\n", '"', '"a"', '"k":', '"\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"',
    '"\\udc00"', '"\\ud800\\u0041"', '"\\q"', '"\\/\\b\\f\\n\\r\\t"', '"é汉"', "\x01", "0", "1", "-0", "01", "1.",
    "1.5", "-2.5e-3", "1E+2", "1e", "-", ".5", "true", "false", "null", "nul", "NaN", "'x'",
]  # fmt: skip
RAW_PIECES = [b"\xff", b"\xe6\xb1", b"\xed\xa0\x80", b"\xc3\xa9"]
texts = st.lists(st.sampled_from(PIECES).map(str.encode) | st.sampled_from(RAW_PIECES), max_size=24).map(b"".join)


# Leaves spelled as JSON text, good and bad, for trees of good structure: one bad leaf spoils a text.
GOOD_LEAVES = [
    '"a"', '""', '"\\u00e9"', '"\\ud83d\\ude00"', '"\\uDBFF\\uDFFF"', '"\\/\\b\\f\\n\\r\\t\\"\\\\"', '"é汉"', "0",
    "-0", "1.5", "-2.5e-3", "1E+2", "12e-5", "0.0e0", "true", "false", "null",
]  # fmt: skip
BAD_LEAVES = [
    '"\\ud800"', '"\\udc00"', '"\\ud800\\u0041"', '"\\ud800x"', '"\\ud800\\"', '"\\q"', '"\\u12g4"', '"\\u00"',
    '"\x01"', '"\x1f"', "01", "-01", "1.", ".5", "1e", "1e+", "-", "+1", "nul", "NaN", "'x'", '"a', "",
]  # fmt: skip
leaves = (
    st.sampled_from(GOOD_LEAVES).map(str.encode)
    | st.sampled_from(GOOD_LEAVES).map(str.encode)
    | st.sampled_from(BAD_LEAVES).map(str.encode)
    | st.sampled_from([b'"\xff"', b'"\xe6\xb1"', b'"\xed\xa0\x80"', b'"\xf0\x9f\x98"'])
)
spaces = st.sampled_from([b"", b" ", b"\n  ", b"\t", b"\r\n"])


@st.composite
def trees(draw: st.DrawFn, inner: st.SearchStrategy[bytes]) -> bytes:
    """An array or object of ``inner`` texts, spaced at random."""
    items = draw(st.lists(inner, max_size=3))
    gap = draw(spaces)
    if draw(st.booleans()):
        return b"[" + gap + (b"," + gap).join(items) + gap + b"]"
    keys = draw(st.lists(st.sampled_from(GOOD_LEAVES[:6] + BAD_LEAVES[:6]), min_size=len(items), max_size=len(items)))
    members = [k.encode() + gap + b":" + gap + v for k, v in zip(keys, items, strict=True)]
    return b"{" + gap + (b"," + gap).join(members) + gap + b"}"


token_texts = st.recursive(leaves, lambda inner: trees(inner), max_leaves=6)


@st.composite
def json_texts(draw: st.DrawFn) -> bytes:
    """Valid JSON (objects and not) with escapes, a tree with leaves good or bad, or a text of random
    pieces; any of those as is, cut, or with a piece inserted."""
    value = draw(
        st.recursive(
            st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(-1e300, 1e300) | st.text(),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
            max_leaves=8,
        )
    )
    text = json.dumps(value, ensure_ascii=draw(st.booleans())).encode()
    text = draw(st.sampled_from([text, draw(token_texts), draw(texts)]))
    cut = draw(st.sampled_from(["none", "none", "cut", "insert"]))
    if cut == "cut" and text:
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif cut == "insert":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(PIECES)).encode() + text[at:]
    return draw(spaces) + text + draw(spaces)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies=st.lists(json_texts(), min_size=1, max_size=8))
def test_generated_verdicts_are_the_native_cores(bodies: list[bytes]) -> None:
    """The native core's verdict, or V_UNKNOWN where a number might overflow; never another."""
    for body, native in zip(bodies, _native_verdicts(bodies), strict=True):
        lane = _verdict(body)
        assert lane == native or (lane == V.V_UNKNOWN and MAY_OVERFLOW.search(body)), body


MAY_OVERFLOW = re.compile(rb"[eE]\+?[0-9]{3,}|[0-9]{300,}")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(bodies=st.lists(json_texts(), min_size=1, max_size=6), contents=st.lists(json_texts(), max_size=6))
def test_generated_bodies_and_contents_through_the_lane(bodies: list[bytes], contents: list[bytes]) -> None:
    """Bodies and (decodable) content texts of every verdict: same bytes and dead letters as the native core."""
    decodable = [c.decode() for c in contents if _utf8(c)]
    values = [*bodies, *(_chat(c) for c in decodable), *(_chat("```json\n" + c + "\n```") for c in decodable)]
    values += [_tool_call(c) for c in decodable]
    lane, native = WIDE_PAIR
    _run(lane, native, synth.batch(values))


def _tool_call(arguments: str) -> bytes:
    """A chat completion whose tool call's arguments are ``arguments``."""
    call = {"id": "t", "type": "function", "function": {"name": "f", "arguments": arguments}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    body = {"id": "c", "object": "chat.completion", "created": 1700000000, "model": "m", "choices": [choice]}
    return json.dumps(body, ensure_ascii=False).encode()


def _utf8(b: bytes) -> bool:
    try:
        b.decode()
    except UnicodeDecodeError:
        return False
    return True


# Content that is not JSON, or JSON that is no object, or an object the content schema refuses: the
# lane's verdicts. None: a valid object the lane's subset leaves to the native core.
CONTENT_VERDICTS = {
    '{"sentiment": "neutral"': "invalid_json",
    '{"sentiment": "neutral",}': "invalid_json",
    "```json\n{'sentiment': 'neutral'}\n```": "invalid_json",
    '{"sentiment": NaN}': "invalid_json",
    '[{"sentiment": "neutral"}] trailing': "invalid_json",
    '{"sentiment": "\\ud800"}': "invalid_json",
    '["\\u00e9"]': "not_an_object",
    "[1e999]": None,  # may overflow: the native core decides (it is not JSON)
    '{"sentiment": "\\u00e9"}': "missing:score",  # escapes in strings are the lane's too
    '{"score": 1, "score": 2}': None,  # a valid object outside the subset (a repeated key): the native core's
}


def test_content_verdicts_are_taken_and_match() -> None:
    lane, native = WIDE_PAIR
    batch = synth.batch([_chat(c) for c in CONTENT_VERDICTS])
    taken, good = _run(lane, native, batch)
    assert good == len(CONTENT_VERDICTS)
    assert taken == sum(v is not None for v in CONTENT_VERDICTS.values())
