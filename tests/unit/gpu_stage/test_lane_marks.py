"""Pass 1's byte marks: strings crossed a word at a time must read exactly as byte by byte.

``mark_bytes`` sets a bit per quote, backslash, control and non-ASCII byte of a batch's values;
``scan_marked`` and ``decode_marked`` skip the plain runs between those bits. Each is checked
against ``json`` itself (as ``scan_string`` is in test_lane_json.py), at every alignment of the
string against the 32-byte words, with the marks made here from numpy, and the compiled
``mark_bytes`` against those marks.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_lane_json import PIECES

from gpu_stage.transform.device import scan as lane_json
from gpu_stage.transform.device.executor import mark_words

LONG_PIECES = [*PIECES, "a" * 40, "汉" * 12, "x" * 70 + "\\n"]


def marks_of(b: np.ndarray, length: int | None = None) -> np.ndarray:
    """The bit per byte of ``b[:length]`` that ``mark_bytes`` sets, computed with numpy."""
    length = len(b) if length is None else length
    v = b[:length]
    bits = (v == 34) | (v == 92) | (v < 0x20) | (v >= 0x80)
    packed = np.packbits(np.concatenate([bits, np.zeros(32, dtype=bool)]), bitorder="little")
    words = mark_words(length)
    return np.frombuffer(packed[: 4 * words].tobytes(), dtype="<u4").astype(np.uint32)


def _expected(body: str) -> tuple[int, bytes] | None:
    try:
        return len(body.encode()) + 2, json.loads('"' + body + '"').encode()
    except (json.JSONDecodeError, UnicodeEncodeError):
        return None


bodies = st.lists(st.sampled_from(LONG_PIECES), max_size=30).map("".join)


@settings(max_examples=500, deadline=None)
@given(body=bodies, lead=st.integers(0, 70), tail=st.sampled_from(["", ",", ' , "x"', '"y\\n"']))
def test_scan_marked_agrees_with_json_at_every_alignment(body: str, lead: int, tail: str) -> None:
    b = np.frombuffer((" " * lead + '"' + body + '"' + tail).encode(), dtype=np.uint8).copy()
    want = _expected(body)
    got = tuple(lane_json.scan_marked(b, lead, len(b), marks_of(b)))
    assert got == ((lead + want[0], len(want[1])) if want else (-1, 0))
    assert got == tuple(lane_json.scan_string(b, lead, len(b), True))


@settings(max_examples=500, deadline=None)
@given(body=bodies.filter(lambda s: _expected(s) is not None), lead=st.integers(0, 70))
def test_decode_marked_decodes_in_place_as_json_does(body: str, lead: int) -> None:
    text = (" " * lead + '"' + body + '"  ').encode()
    b = np.frombuffer(text, dtype=np.uint8).copy()
    marks = marks_of(b)
    s, e = lead + 1, len(text) - 3
    want = json.loads('"' + body + '"').encode()
    assert lane_json.decode_marked(b, s, e, marks) == s + len(want)
    assert b[s : s + len(want)].tobytes() == want
    assert b[e:].tobytes() == text[e:]  # nothing past the string is touched


def test_next_mark_crosses_words_and_stops_at_the_end() -> None:
    b = np.frombuffer(b"a" * 100 + b"\\" + b"a" * 40 + b'"', dtype=np.uint8)
    marks = marks_of(b)
    assert [lane_json.next_mark(marks, p, len(b)) for p in (0, 31, 32, 99, 100)] == [100] * 5
    assert lane_json.next_mark(marks, 101, len(b)) == 141
    assert lane_json.next_mark(marks, 0, 90) == 90  # a mark past the end is not found
    assert lane_json.next_mark(marks, 101, 141) == 141


def test_a_lone_surrogate_bad_utf8_and_a_control_byte_are_refused() -> None:
    for raw in (b'"ab\\ud800"', b'"ab\xff"', b'"ab\x01"', b'"abc'):
        b = np.frombuffer(raw, dtype=np.uint8)
        assert tuple(lane_json.scan_marked(b, 0, len(b), marks_of(b))) == (-1, 0)


@pytest.mark.parametrize("length", [0, 1, 31, 32, 33, 64, 100, 257])
def test_the_compiled_mark_bytes_sets_the_same_bits(length: int) -> None:
    pytest.importorskip("numba")
    from gpu_stage.transform.device.kernels import compile_lane

    rng = np.random.default_rng(length)
    b = rng.choice(np.array([97, 32, 34, 92, 10, 0xE6, 0x7F, 0x80, 0xFF], dtype=np.uint8), size=length + 40)
    marks = np.full(mark_words(length) + 3, 0xFFFFFFFF, dtype=np.uint32)  # longer than needed, not clear
    compile_lane("cpu").mark_bytes(b, length, marks)
    words = mark_words(length)
    assert marks[:words].tolist() == marks_of(b, length).tolist()  # bits past length clear
    assert (marks[words:] == 0xFFFFFFFF).all()  # words past the last byte's untouched
