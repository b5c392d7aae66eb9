"""``bench.transform.time_stream``: the timed stream lets each result go, the checksum comes from a second one."""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pytest

from bench.transform import time_batches, time_stream
from gpu_stage.transform.batch import EncodedRows, ParseResult
from llmpipe.errors import ConfigError


class FakeStream:
    """Yields one result per batch (the batch is its bytes); notes results still alive when asked for the next."""

    name = "fake"

    def __init__(self, change_on_stream: int | None = None) -> None:
        self.streams = 0
        self.held_at_next: list[int] = []
        self.held_at_start: list[int] = []  # results of earlier streams still alive as a stream starts
        self.every: list[weakref.ref[Any]] = []
        self.change_on_stream = change_on_stream

    def parse_stream(self, batches: Iterable[Any], overlap: bool = True) -> Iterator[ParseResult]:
        del overlap
        self.streams += 1
        self.held_at_start.append(sum(ref() is not None for ref in self.every))
        alive: list[weakref.ref[Any]] = []
        for batch in batches:
            self.held_at_next.append(sum(ref() is not None for ref in alive))
            yield self._result(batch, alive)
        self.every += alive

    def _result(self, batch: bytes, alive: list[weakref.ref[Any]]) -> ParseResult:
        buf = np.frombuffer(batch, dtype=np.uint8).copy()
        if self.streams == self.change_on_stream:
            buf = buf[:-1]
        alive.append(weakref.ref(buf))
        return ParseResult(EncodedRows(buf, np.array([0, len(buf)]), np.array([0])), [])


BATCHES = [bytes([k]) * (100 + k) for k in range(6)]


def test_the_timed_stream_holds_no_result_and_the_checksum_is_the_streams_bytes() -> None:
    backend = FakeStream()
    timed = time_stream(backend, BATCHES, keep=True)  # type: ignore[arg-type]
    assert backend.streams == 3  # warm-up, timed, checked
    timed_stream = backend.held_at_next[3 : 3 + len(BATCHES)]
    assert timed_stream == [0] * len(BATCHES)  # each result let go before the next was asked for
    assert backend.held_at_start[1] == 0  # and none of the warm-up's held into it
    assert timed.sha256 == hashlib.sha256(b"".join(BATCHES)).hexdigest()
    assert len(timed.seconds) == len(BATCHES) == len(timed.results) and timed.good == len(BATCHES)


def test_a_checked_stream_unlike_the_timed_one_is_an_error() -> None:
    with pytest.raises(ConfigError, match="differs from the timed one"):
        time_stream(FakeStream(change_on_stream=3), BATCHES)  # type: ignore[arg-type]


def test_several_passes_time_one_stream_each_and_give_the_median_one() -> None:
    backend = FakeStream()
    timed = time_stream(backend, BATCHES, keep=True, passes=3)  # type: ignore[arg-type]
    assert backend.streams == 5  # warm-up, three timed, checked
    assert len(timed.pass_seconds) == 3
    assert round(sum(timed.seconds), 6) == sorted(timed.pass_seconds)[1]
    assert timed.sha256 == hashlib.sha256(b"".join(BATCHES)).hexdigest()
    assert len(timed.seconds) == len(BATCHES) == len(timed.results)


class FakeBatches:
    """One ``parse`` call per batch (the batch is its bytes); ``short_on_call`` drops a byte on that call."""

    name = "fake-batches"

    def __init__(self, short_on_call: int | None = None) -> None:
        self.calls = 0
        self.short_on_call = short_on_call

    def parse(self, batch: bytes) -> ParseResult:
        self.calls += 1
        buf = np.frombuffer(batch, dtype=np.uint8).copy()
        if self.calls == self.short_on_call:
            buf = buf[:-1]
        return ParseResult(EncodedRows(buf, np.array([0, len(buf)]), np.array([0])), [])


def test_passes_of_single_calls_give_the_median_pass_and_the_first_passes_checksum() -> None:
    backend = FakeBatches()
    timed = time_batches(backend, BATCHES, keep=True, passes=3)  # type: ignore[arg-type]
    assert backend.calls == 1 + 3 * len(BATCHES)  # the warm-up call, then three passes
    assert round(sum(timed.seconds), 6) == sorted(timed.pass_seconds)[1]
    assert timed.sha256 == hashlib.sha256(b"".join(BATCHES)).hexdigest()
    assert [bytes(r.encoded.buf) for r in timed.results] == BATCHES
    assert timed.good == len(BATCHES)


def test_a_pass_unlike_the_first_is_an_error() -> None:
    with pytest.raises(ConfigError, match="passes over the same batches differ"):
        time_batches(FakeBatches(short_on_call=1 + len(BATCHES) + 2), BATCHES, passes=2)  # type: ignore[arg-type]


def test_a_timed_stream_unlike_the_one_before_is_an_error() -> None:
    with pytest.raises(ConfigError, match="passes over the same batches differ"):
        time_stream(FakeStream(change_on_stream=3), BATCHES, passes=2)  # type: ignore[arg-type]
