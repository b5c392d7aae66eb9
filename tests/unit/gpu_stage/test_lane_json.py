"""The device lane's string and whitespace scanners, run as plain Python, against ``json`` itself.

The cases put quotes, escapes, multi-byte characters and control bytes at every position of short
strings, invalid bytes at every offset, and whitespace runs of every length.
"""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_stage.transform.device import scan as lane_json
from gpu_stage.transform.device.emit import put_text

PIECES = ["a", "Z", " ", "~", '\\"', "\\\\", "\\n", "\\t", "\\/", "é", "汉", "😀", "\\u00e9", "\x01", "\\q"]
# \u escapes: ASCII, NUL, the BMP, a surrogate pair, lone surrogates (invalid), bad hex, upper case.
PIECES += ["\\u0041", "\\u0000", "\\u6C49", "\\ud83d\\ude00", "\\ud800", "\\udc00", "\\u12", "\\u00zz", "\\uFFFF"]


def _bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode(), dtype=np.uint8).copy()


def _expected(body: str) -> tuple[int, int]:
    """``scan_string``'s answer for ``"body"``: end after the closing quote and decoded length, or (-1, 0)."""
    try:
        decoded = json.loads('"' + body + '"').encode()  # a lone surrogate decodes, then fails here
    except (json.JSONDecodeError, UnicodeEncodeError):
        return -1, 0
    return len(body.encode()) + 2, len(decoded)


bodies = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)


@settings(max_examples=600, deadline=None)
@given(body=bodies, tail=st.sampled_from(["", ",", ' , "x"']))
def test_scan_string_agrees_with_json(body: str, tail: str) -> None:
    b = _bytes('"' + body + '"' + tail)
    assert tuple(lane_json.scan_string(b, 0, len(b), True)) == _expected(body)


def test_scan_string_refuses_bad_utf8_and_a_missing_quote_at_every_offset() -> None:
    for k in range(20):
        bad = np.frombuffer(b'"' + b"a" * k + b"\xff" + b"a" * 9 + b'"', dtype=np.uint8)
        assert tuple(lane_json.scan_string(bad, 0, len(bad), True)) == (-1, 0)
        open_end = np.frombuffer(b'"' + b"a" * k, dtype=np.uint8)
        assert tuple(lane_json.scan_string(open_end, 0, len(open_end), True)) == (-1, 0)


@settings(max_examples=600, deadline=None)
@given(body=bodies.filter(lambda s: _expected(s)[0] > 0))
def test_copy_string_decodes_as_json_does_in_place_and_not(body: str) -> None:
    want = json.loads('"' + body + '"').encode()
    b = _bytes('"' + body + '"')
    out = np.zeros(len(b) + 8, dtype=np.uint8)
    assert lane_json.copy_string(b, 1, len(b) - 1, out, 3) == 3 + len(want)
    assert bytes(out[3 : 3 + len(want)]) == want
    assert lane_json.copy_string(b, 1, len(b) - 1, b, 1) == 1 + len(want)  # in place, as content is
    assert bytes(b[1 : 1 + len(want)]) == want


@settings(max_examples=300, deadline=None)
@given(body=bodies.filter(lambda s: _expected(s)[0] > 0), at=st.integers(0, 9))
def test_put_text_writes_the_decoded_string(body: str, at: int) -> None:
    want = json.loads('"' + body + '"').encode()
    b = _bytes(" " * at + body)
    out = np.zeros(len(want) + 16, dtype=np.uint8)
    q = put_text(b, at, len(want), True, out, 0, True)
    head = bytes(out[: q - len(want)])  # the Avro length
    assert bytes(out[q - len(want) : q]) == want and head[0] == (len(want) << 1) % 128 | (0x80 if len(want) > 63 else 0)


@given(before=st.integers(0, 30), after=st.integers(0, 30), ws=st.sampled_from([" ", "\t", "\n", "\r", " \r\n\t"]))
def test_whitespace_runs_of_every_length(before: int, after: int, ws: str) -> None:
    text = (ws * before)[:before] + "x" + (ws * after)[:after]
    b = _bytes(text)
    assert lane_json.skip_ws(b, 0, len(b)) == before
    assert lane_json.trim_end(b, 0, len(b)) == before + 1
    assert lane_json.skip_ws(b, before + 1, len(b)) == len(b)
    assert lane_json.trim_end(b, before + 1, len(b)) == before + 1
