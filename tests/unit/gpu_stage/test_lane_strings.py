r"""The lane's string marks (:mod:`gpu_stage.transform.device.strings`) against its byte-at-a-time string scan.

For every string of a body that a walk from the body's start would cross (up to and including the
first one ``scan_string`` refuses), :func:`string_at` over the marks must give ``scan_string``'s
answer, with and without escapes allowed, and the decoded copy must hold the string's text as
Python's ``json`` decodes it (and the body's bytes outside strings as they are): on real-shaped and
every-escape bodies, on strings built to hit each rule (escapes, surrogates, UTF-8 bounds, control
bytes, unclosed strings), and on bodies with bytes changed at random.
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import numpy as np
import pytest

pytest.importorskip("numba")

from bench.escape_corpus import escape_bodies
from bench.real_corpus import generate
from gpu_stage.transform.device.kernels import compile_lane
from gpu_stage.transform.device.scan import REFUSED

MARKERS = {"cpu": "mark_strings", "cpu-warp": "mark_strings_steps"}
"""Each build's strings pass: a thread a body, and a warp a body (what the executors run)."""


class _Build:
    """A build's functions, its strings pass as ``mark_strings``."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.built = compile_lane(target)
        self.mark_strings = getattr(self.built, MARKERS[target])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.built, name)


@pytest.fixture(scope="module", params=sorted(MARKERS))
def fns(request: pytest.FixtureRequest) -> Any:
    return _Build(request.param)


def _strings_crossed(fns: Any, b: Any, s: int, e: int) -> list[int]:
    """Opening quotes a walk from ``s`` crosses, found with the byte scan alone: up to the first refused string."""
    opens, p = [], s
    while p < e:
        if b[p] == 34:
            opens.append(p)
            end, _ = fns.scan_string(b, p, e, True)
            if end < 0:
                break
            p = end
        else:
            p += 1
    return opens


def _check(fns: Any, bodies: list[bytes], offset: int = 3) -> int:
    """Mark each body (at ``offset`` in a buffer, as a batch's row), compare every crossed string; their count."""
    checked = 0
    for body in bodies:
        b = np.frombuffer(b"{}x" + body + b"\x00", dtype=np.uint8).copy()
        s, e = offset, offset + len(body)
        # What the array held before is no mark: a stale REFUSED must not make a good or long string look refused.
        stale = [np.full(len(b), fill, dtype=np.uint16) for fill in (7, REFUSED)]
        decoded = np.zeros(len(b), dtype=np.uint8)
        counts = {fns.mark_strings(b, marks, decoded, s, e) for marks in stale}
        opens = _strings_crossed(fns, b, s, e)
        assert len(counts) == 1 and counts.pop() >= len(opens)
        for p, marks, allow in itertools.product(opens, stale, (True, False)):
            assert fns.string_at(b, marks, p, e, allow) == fns.scan_string(b, p, e, allow), (body, p, allow)
        for p in opens:
            end, length = fns.scan_string(b, p, e, True)
            if end >= 0:
                text = json.loads(bytes(b[p:end])).encode()
                assert bytes(decoded[p + 1 : p + 1 + length]) == text, (body, p)
            checked += 1
        outside = np.ones(len(b), dtype=bool)
        for p in opens:
            end, _ = fns.scan_string(b, p, e, True)
            outside[p + 1 : end if end >= 0 else e] = False
        outside[:s] = outside[e:] = False
        assert (decoded[outside] == b[outside]).all(), body
    return checked


def test_marks_answer_as_the_scan_on_real_shaped_bodies(fns: Any) -> None:
    assert _check(fns, list(generate(3000).values)) > 3000 * 20


def test_marks_answer_as_the_scan_on_every_escape(fns: Any) -> None:
    assert _check(fns, list(escape_bodies(2000).values)) > 2000 * 10


RULES = [
    b'""',
    b'"a"',
    b'"\\""',
    b'"\\\\"',
    b'"\\/\\b\\f\\n\\r\\t"',
    b'"\\x"',
    b'"\\u0041"',
    b'"\\u00e9\\u20ac"',
    b'"\\u0000"',
    b'"\\u07ff\\u0800\\uffff"',
    b'"\\ud83d\\ude00"',
    b'"\\uD83D\\uDE00"',
    b'"\\ud83d"',
    b'"\\ud83dx"',
    b'"\\ud83d\\n"',
    b'"\\ud83d\\u0041"',
    b'"\\ude00"',
    b'"\\udbff\\udfff"',
    b'"\\u12"',
    b'"\\u12g4"',
    b'"\\u"',
    b'"\\',
    b'"abc',
    b'"a\x01"',
    b'"a\x1f"',
    b'"a\x7f"',
    b'"\t"',
    "é€😀订".encode(),
    b'"\xc3"',
    b'"\xc3\xa9"',
    b'"\xc0\x80"',
    b'"\xc1\xbf"',
    b'"\xe0\x80\x80"',
    b'"\xe0\xa0\x80"',
    b'"\xed\xa0\x80"',
    b'"\xed\x9f\xbf"',
    b'"\xf0\x80\x80\x80"',
    b'"\xf0\x90\x80\x80"',
    b'"\xf4\x8f\xbf\xbf"',
    b'"\xf4\x90\x80\x80"',
    b'"\xf5\x80\x80\x80"',
    b'"\xff"',
    b'"\x80"',
    b'"\xe2\x82"',
    b'"\xe2\x82\\n"',
    b'"\xe2"x',
]


@pytest.mark.parametrize("text", RULES)
def test_each_string_rule_as_the_scan(fns: Any, text: bytes) -> None:
    if not text.startswith(b'"'):
        text = b'"' + text + b'"'
    bodies = [text, b'{"k": ' + text + b', "n": "after\\n"}', b"[" + text + b"," + text + b"]"]
    assert _check(fns, bodies) >= 1


def test_marks_answer_as_the_scan_on_bodies_changed_at_random(fns: Any) -> None:
    rng = random.Random(11)
    pool = list(generate(400).values) + list(escape_bodies(400).values)
    changed = []
    interesting = [0x22, 0x5C, 0x75, 0x00, 0x1F, 0x7F, 0x80, 0xBF, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xFF, 0x44, 0x65]
    for _ in range(4000):
        body = bytearray(rng.choice(pool))
        for _ in range(rng.randint(1, 4)):
            if body:
                at = rng.randrange(len(body))
                body[at] = rng.choice(interesting) if rng.random() < 0.8 else rng.randrange(256)
        if rng.random() < 0.2 and body:
            del body[rng.randrange(len(body)) :]
        changed.append(bytes(body))
    assert _check(fns, changed) > 4000


def test_an_empty_marks_array_scans_the_bytes(fns: Any) -> None:
    b = np.frombuffer(b'"a\\u00e9b" ', dtype=np.uint8).copy()
    assert fns.string_at(b, b[:0], 0, len(b), True) == (10, 4)
    assert fns.string_at(b, b[:0], 0, len(b), False) == (-1, 0)


def test_the_marks_of_a_body_stay_inside_it(fns: Any) -> None:
    body = b'{"a": "x\\"y", "b": ["", "\\u00e9"]}'
    b = np.frombuffer(b"ZZ" + body + b"ZZ", dtype=np.uint8).copy()
    marks = np.full(len(b), 7, dtype=np.uint16)
    decoded = np.full(len(b), 7, dtype=np.uint8)
    assert fns.mark_strings(b, marks, decoded, 2, 2 + len(body)) == 5
    assert (marks[:2] == 7).all() and (marks[-2:] == 7).all()
    assert (decoded[:2] == 7).all() and (decoded[-2:] == 7).all()
    quotes = [2 + k for k, c in enumerate(body) if c == 34 and body[k - 1] != 92]
    assert (marks[quotes[0]], marks[quotes[1]]) == (2, 1)  # "a": 1 byte
    assert (marks[quotes[2]], marks[quotes[3]]) == (5, 3)  # "x\"y": 3 bytes decoded, 4 spelled


def test_a_refused_string_is_marked_so_and_a_long_one_is_not(fns: Any) -> None:
    body = b'{"long": "' + b"z" * 70000 + b'", "bad": "a\x01b", "open": "runs to the end'
    _, marks, _ = _marked(fns.mark_strings, body, before=b"")
    long, bad, open_ = (body.index(b'"', body.index(key) + len(key) + 1) for key in (b'"long"', b'"bad"', b'"open"'))
    assert [(marks[p], marks[p + 1]) for p in (long, bad, open_)] == [(0, 0), (0, REFUSED), (0, REFUSED)]
    assert [fns.refused(marks, p, len(body)) for p in (long, bad, open_)] == [False, True, True]
    assert not fns.refused(marks[:0], open_, len(body))  # no marks: nothing known


def test_a_string_longer_than_a_mark_holds_is_scanned(fns: Any) -> None:
    from gpu_stage.transform.device.strings import MAX_SPAN

    long_plain = b'"' + b"a" * (MAX_SPAN + 10) + b'"'
    long_escaped = b'"' + b"\\n\\u00e9" * (MAX_SPAN // 4) + b'"'
    bodies = [b'{"k": ' + v + b', "n": "after"}' for v in (long_plain, long_escaped)]
    assert _check(fns, bodies) == 2 * 4


def _marked(mark: Any, body: bytes, before: bytes = b"{}x") -> tuple[int, np.ndarray, np.ndarray]:
    """A strings pass over ``body`` after the bytes ``before`` in one buffer: (its count, marks, decoded copy)."""
    b = np.frombuffer(before + body + b"\x00", dtype=np.uint8).copy()
    marks = np.zeros(len(b), dtype=np.uint16)
    decoded = np.zeros(len(b), dtype=np.uint8)
    count = mark(b, marks, decoded, len(before), len(before) + len(body))
    return count, marks, decoded


def strings_good(fns: Any, b: Any) -> bool:
    """Whether every string a walk of ``b`` from its start crosses is good (after a bad one the passes may differ)."""
    return all(fns.scan_string(b, p, len(b), True)[0] >= 0 for p in _strings_crossed(fns, b, 0, len(b)))


def test_a_warp_a_body_marks_and_decodes_as_a_thread_a_body() -> None:
    """On bodies whose every string is good, both strings passes write the same entries and the same bytes."""
    one, steps = _Build("cpu"), _Build("cpu-warp")
    bodies = list(generate(1500).values) + list(escape_bodies(800).values)
    compared = 0
    for body in bodies:
        if not strings_good(one, np.frombuffer(body, dtype=np.uint8)):
            continue  # a string refused: the strings after it may be marked apart
        for got, want in zip(_marked(steps.mark_strings, body)[1:], _marked(one.mark_strings, body)[1:], strict=True):
            assert got.tobytes() == want.tobytes(), body
        compared += 1
    assert compared > 2000


STEP_BODIES = [
    b'{"a":"b","cc":"dd","e":1,"f":"","g":"h i j"}',
    b'{"a":"b","n":"\\n","c":"d","u":"\xc3\xa9","x":"y","z":"zz"}',
    b'{"long":"' + b"p" * 45 + b'","k":"v","e":"\\"","w":"' + b"q" * 31 + b'"}',
    b'{\n  "pretty": "yes",\n\t"k": "v" }\n',
    b'\xc3\xa9{"outside":"utf-8 before"}\\',
    b'{"a":"b","open":"runs to the end',
    b'{"a":"b","open":"',
]
"""Bodies whose steps hold several short strings, plain or not, strings across a step's end and unclosed ones.

Their strings are good: after a bad one the two builds may copy a different byte (see
:func:`gpu_stage.transform.device.warp.mark_strings_steps`), which the tests above allow for."""


@pytest.mark.parametrize("body", STEP_BODIES)
def test_a_steps_short_strings_are_marked_as_a_thread_marks_them(body: bytes) -> None:
    """At every alignment to the 32-byte steps, the warp build's marks and decoded copy equal the thread build's."""
    one, warp = compile_lane("cpu"), compile_lane("cpu-warp")
    for shift in range(40):
        got, want = (_marked(fn, body, b"z" * shift) for fn in (warp.mark_strings_steps, one.mark_strings))
        assert got[0] == want[0], (shift, body)
        assert got[1].tobytes() == want[1].tobytes() and got[2].tobytes() == want[2].tobytes(), (shift, body)
    assert _check(_Build("cpu-warp"), [body]) >= 1
