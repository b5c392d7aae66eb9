from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connector.tracker import PrefixTracker


def test_prefix_waits_for_gap() -> None:
    t: PrefixTracker[str] = PrefixTracker()
    for off in (10, 11, 13, 14):  # 12 is a transaction marker: never read
        t.register(off)
    t.complete(11, "b")
    t.complete(13, "c")
    assert t.ready() == ([], None)
    t.complete(10, "a")
    assert t.ready() == (["a", "b", "c"], 14)
    assert t.ready(limit=2) == (["a", "b"], 12)
    t.release(2)
    assert len(t) == 2
    assert t.ready() == (["c"], 14)


def test_offsets_must_increase() -> None:
    t: PrefixTracker[int] = PrefixTracker()
    t.register(5)
    with pytest.raises(ValueError, match="not after"):
        t.register(5)


@given(st.integers(1, 200), st.integers(0, 2**32))
def test_committed_prefix_never_skips(n: int, seed: int) -> None:
    rng = random.Random(seed)
    t: PrefixTracker[int] = PrefixTracker()
    for off in range(n):
        t.register(off)
    finish = list(range(n))
    rng.shuffle(finish)
    committed: list[int] = []
    for off in finish:
        t.complete(off, off)
        if rng.random() < 0.3:
            ready, nxt = t.ready()
            if nxt is not None:
                assert nxt == ready[-1] + 1 and ready == list(range(len(committed), nxt))
                committed.extend(ready)
                t.release(len(ready))
    ready, _ = t.ready()
    committed.extend(ready)
    assert committed == list(range(n))
