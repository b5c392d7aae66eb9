"""The lane's ``warp`` build (compiled for the CPU): strings read 32 bytes at a step, the result of a byte at a time.

``gpu_stage/transform/device/warp.py`` reads a string a step of 32 bytes at a time, each byte by a
lane of the warp; the CPU build runs the lanes one after another, the same code otherwise. Its
:func:`scan_string` and :func:`copy_string` must give what the one-thread build's give for any
bytes, valid or not, wherever an escape, a UTF-8 sequence or the closing quote falls against a
step's end; its pass 1 must give the native core's bytes on the real-shaped and escape corpora.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba")

from test_gpu_stage_native import _assert_same

from bench import escape_corpus, real_corpus
from gpu_stage import synth
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.device.executor import CpuExecutor
from gpu_stage.transform.device.kernels import compile_lane
from gpu_stage.transform.device.lane import LaneTransform
from gpu_stage.transform.native import NativeBackend

ONE = compile_lane("cpu")
WARP = compile_lane("cpu-warp")
WIDE = TransformSettings(max_record_bytes=1 << 20)

# Pieces of a string's text: escapes of every kind (a pair, lone halves, short and unknown ones),
# UTF-8 of every width and broken UTF-8 (a stray continuation, a cut sequence, an encoded surrogate,
# an overlong lead), control bytes, quotes and backslashes alone.
PIECES = [
    b'\\"', b"\\\\", b"\\/", b"\\b", b"\\f", b"\\n", b"\\r", b"\\t", b"\\u00e9", b"\\u4e2d", b"\\uD83D\\uDE00",
    b"\\ud83d\\ude00", b"\\uDBFF\\uDFFF", b"\\ud83d", b"\\ude00", b"\\ud83dx", b"\\ud83d\\n", b"\\u12", b"\\uZZZZ",
    b"\\x", b"\\", b'"', "é".encode(), "中".encode(), "😀".encode(), b"\x80", b"\xc3", b"\xe4\xb8", b"\xf0\x9f\x98",
    b"\xed\xa0\x80", b"\xc0\xaf", b"\xf5\x80\x80\x80", b"\x01", b"\x1f", b"\x7f",
]  # fmt: skip
GOOD_PIECES = [b'\\"', b"\\\\", b"\\n", b"\\u00e9", b"\\uD83D\\uDE00", "é".encode(), "中".encode(), "😀".encode()]


def _array(text: bytes) -> np.ndarray:
    return np.frombuffer(text, dtype=np.uint8).copy()


def _same_scan(text: bytes) -> tuple[int, int]:
    """Both builds' scan of the string at 0 of ``text``, with and without escapes allowed; the one-thread result."""
    b = _array(text)
    for allow in (True, False):
        assert WARP.scan_string(b, 0, len(b), allow) == ONE.scan_string(b, 0, len(b), allow), (text, allow)
    return ONE.scan_string(b, 0, len(b), True)


def _same_copy(text: bytes, end: int) -> None:
    """Both builds' decoding of the checked string ``text[:end]``: in place, and to another buffer ahead of it."""
    for at in (None, 5):
        one, warp = _array(text), _array(text)
        out_one = one if at is None else np.zeros(len(text) + at, dtype=np.uint8)
        out_warp = warp if at is None else np.zeros(len(text) + at, dtype=np.uint8)
        q = 1 if at is None else at
        ends = ONE.copy_string(one, 1, end - 1, out_one, q), WARP.copy_string(warp, 1, end - 1, out_warp, q)
        assert ends[0] == ends[1], text
        assert out_one[q : ends[0]].tobytes() == out_warp[q : ends[1]].tobytes(), text


def test_only_the_warp_build_reads_strings_in_steps() -> None:
    assert WARP.LANE_STEPS
    assert not ONE.LANE_STEPS


@pytest.mark.parametrize("piece", PIECES)
def test_every_piece_at_every_place_of_a_step(piece: bytes) -> None:
    """The piece at each of 70 places, so that it starts and ends at every lane of a step and runs over its end."""
    for before, after in itertools.product(range(70), (0, 1, 40)):
        for tail in (b'"', b'"xyz', b""):
            text = b'"' + b"a" * before + piece + b"b" * after + tail
            end, _ = _same_scan(text)
            if end > 0:
                _same_copy(text, end)


def test_every_two_pieces_side_by_side_about_a_steps_end() -> None:
    """A piece's meaning may hang on the one before it (a continuation byte after a sequence, a backslash after one)."""
    for first, second in itertools.product(PIECES, repeat=2):
        for before in range(26, 34):
            text = b'"' + b"a" * before + first + second + b'"'
            end, _ = _same_scan(text)
            if end > 0:
                _same_copy(text, end)


def test_whitespace_skips_as_a_byte_at_a_time() -> None:
    """Runs of every whitespace byte and of every length about a step's end, then a byte or the end."""
    for run, fill in itertools.product(range(70), (b" ", b"\n", b"\t", b"\r", b" \r\n\t")):
        text = b"x" + (fill * run)[:run] + b"}"
        b = _array(text)
        for end in (len(b), len(b) - 1):
            for p in (0, 1, 2, end):
                got = WARP.skip_ws(b, p, end)
                assert got == ONE.skip_ws(b, p, end), (run, fill, p, end)
        assert WARP.skip_ws(b, 1, len(b)) == 1 + run


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(st.one_of(st.sampled_from(PIECES), st.integers(1, 40).map(lambda n: b"x" * n)), max_size=24),
    closed=st.booleans(),
)
def test_any_string_scans_and_copies_as_a_byte_at_a_time(parts: list[bytes], closed: bool) -> None:
    text = b'"' + b"".join(parts) + (b'"' if closed else b"") + b"  "
    end, _ = _same_scan(text)
    if end > 0:
        _same_copy(text, end)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.one_of(st.sampled_from(GOOD_PIECES), st.integers(1, 70).map(lambda n: b"y" * n)), max_size=30))
def test_good_strings_decode_to_their_text(parts: list[bytes]) -> None:
    """Checked against Python's own decoding, not only against the other build."""
    import json

    text = b'"' + b"".join(parts) + b'"'
    end, length = _same_scan(text)
    want = json.loads(text).encode("utf-8", "surrogatepass")
    assert (end, length) == (len(text), len(want))
    b = _array(text)
    assert WARP.copy_string(b, 1, end - 1, b, 1) == 1 + len(want)
    assert b[1 : 1 + len(want)].tobytes() == want


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.one_of(st.sampled_from(GOOD_PIECES), st.integers(1, 70).map(lambda n: b"y" * n)), max_size=30))
def test_pass_2_decodes_a_string_as_a_byte_at_a_time(parts: list[bytes]) -> None:
    """Pass 2's ``put_decoded`` and ``put_text`` of the warp build give the one-thread build's bytes."""
    text = b'"' + b"".join(parts) + b'"' + b'"x": "y"'  # more JSON after the closing quote
    end, length = ONE.scan_string(_array(text), 0, len(text), True)
    outs = [np.zeros(len(text) + 16, dtype=np.uint8) for _ in range(4)]
    src = _array(text)
    ends = [ONE.put_decoded(src, 1, length, outs[0], 3), WARP.put_decoded(src, 1, length, outs[1], 3)]
    assert ends == [3 + length] * 2 and outs[0].tobytes() == outs[1].tobytes()
    plain = end - 2  # the spelling's bytes as they are
    ends = [fns.put_text(src, 1, plain, False, out, 0, True) for fns, out in ((ONE, outs[2]), (WARP, outs[3]))]
    assert ends[0] == ends[1] and outs[2].tobytes() == outs[3].tobytes()


def test_pass_2_decodes_a_numbers_text_to_its_length() -> None:
    """``stop_reason`` may be a number, copied as text by ``put_decoded``: its length ends it, not a quote."""
    for text, length in ((b'128009,"token_ids":null}', 6), (b"7}" + b" " * 40 + b'"', 1), (b"-0.5e3]", 6)):
        outs = [np.zeros(64, dtype=np.uint8) for _ in range(2)]
        ends = [fns.put_decoded(_array(text), 0, length, out, 2) for fns, out in ((ONE, outs[0]), (WARP, outs[1]))]
        assert ends == [2 + length] * 2
        assert outs[0].tobytes() == outs[1].tobytes() and outs[1][2 : 2 + length].tobytes() == text[:length]


@pytest.fixture(scope="module")
def lanes() -> tuple[LaneTransform, LaneTransform]:
    """The lane in ``warp`` order and in ``balanced`` (one thread per row), both compiled for the CPU."""
    return LaneTransform(replace(WIDE, lane_order="warp"), CpuExecutor), LaneTransform(WIDE, CpuExecutor)


@pytest.mark.parametrize("kind", ["real", "escapes"])
def test_pass_1_in_warps_gives_the_native_cores_bytes(lanes: tuple[LaneTransform, LaneTransform], kind: str) -> None:
    """Real-shaped bodies (escapes at both levels, CJK, broken bodies) and bodies full of escapes."""
    made = real_corpus.generate(2000) if kind == "real" else escape_corpus.escape_bodies(2000, 11)
    batch = synth.batch(made.values, first_offset=7)
    warp, one_thread = lanes
    before = warp.taken_rows
    _assert_same(NativeBackend(WIDE).parse(batch), warp.parse(batch))
    assert warp.taken_rows - before > 0.95 * len(batch)
    assert warp.measure(batch).tolist() == one_thread.measure(batch).tolist()


@pytest.mark.parametrize("pass_1", ["warp", "balanced"])
@pytest.mark.parametrize("piece_bytes", [0, 64 << 10])
@pytest.mark.parametrize("kind", ["real", "escapes"])
def test_pass_2_in_warps_gives_the_native_cores_bytes(
    lanes: tuple[LaneTransform, LaneTransform], kind: str, piece_bytes: int, pass_1: str
) -> None:
    """Pass 2 a warp per row (``write_warp``), the output in one piece and in pieces of 64 KiB.

    After pass 1 a warp per row, and after pass 1 a thread per row in ``balanced`` order, whose
    rows pass 2 then takes as they came.
    """
    made = real_corpus.generate(2000, seed=5) if kind == "real" else escape_corpus.escape_bodies(2000, 12)
    batch = synth.batch(made.values, first_offset=7)
    warp = lanes[0] if pass_1 == "warp" else lanes[1]
    assert warp.executor.lane_order == pass_1
    own = warp.executor.write_warp, warp.executor.write_piece_bytes
    warp.executor.write_warp, warp.executor.write_piece_bytes = 1, piece_bytes
    try:
        _assert_same(NativeBackend(WIDE).parse(batch), warp.parse(batch))
    finally:
        warp.executor.write_warp, warp.executor.write_piece_bytes = own


def test_the_cuda_warp_build_replaces_each_lane_by_lane_part() -> None:
    """Each part the CPU build runs lane by lane has its one-lane CUDA twin, under the same name."""
    from gpu_stage.transform.device import kernels, warp

    ns: dict[str, object] = {}
    exec(kernels._WARP_SOURCE, ns)
    for name in kernels._WARP_FUNCTIONS:
        assert callable(ns[name]), name
    for name in ("warp_marks", "warp_widths", "warp_copy", "first_bit"):
        assert name in kernels._WARP_FUNCTIONS and callable(getattr(warp, name)), name
    assert "warp.py" in kernels._SOURCES and kernels._SOURCES.index("warp.py") < kernels._SOURCES.index("walk.py")


def test_the_cuda_warp_builds_masks_are_32_bits() -> None:
    """numba's ``ballot_sync`` is a signed int32: every ballot goes through ``ballot``, which masks it to 32 bits."""
    from gpu_stage.transform.device import kernels

    source = kernels._WARP_SOURCE
    assert "& 0xFFFFFFFF" in source[source.index("def ballot(") :].split("\ndef ")[0]
    assert source.count("cuda.ballot_sync(") == 2  # ballot's own, and warp_widths' test of any bit


def _escape_starts_one_by_one(slashes: int) -> int:
    """A run's first backslash begins an escape, the next is escaped by it, and so on along the run."""
    starts = 0
    for lane in range(32):
        escaped = lane > 0 and (starts >> (lane - 1)) & 1
        if (slashes >> lane) & 1 and not escaped:
            starts |= 1 << lane
    return starts


def test_escape_starts_are_every_other_backslash_of_each_run() -> None:
    """Every pattern of 14 lanes, at the step's start and at its end (where a run's carry leaves the 32 bits)."""
    for low in range(1 << 14):
        for slashes in (low, low << 18):
            assert WARP.escape_starts(slashes) == _escape_starts_one_by_one(slashes), bin(slashes)
    assert WARP.escape_starts(0xFFFFFFFF) == 0x55555555


def test_the_cuda_warp_build_under_the_simulator_gives_the_same_strings_and_rows() -> None:
    """The CUDA-only parts (ballots, the lanes' sums, each lane's share) run in numba's CUDA simulator.

    Strings and whitespace against the one-thread build, then both passes on a body of each kind
    against the native core (``warp_simulated.py``).
    """
    script = Path(__file__).with_name("warp_simulated.py")
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, str(script), "6"], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "agrees on 60 strings, 7 bodies of short strings, 12 whitespace runs and 7 bodies" in done.stdout
