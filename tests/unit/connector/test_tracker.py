from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connector.progress import Progress, ranges
from connector.tracker import Window


def test_finished_records_commit_past_a_running_one() -> None:
    w: Window[str] = Window()
    for off in (10, 11, 13, 14):  # 12 is a transaction marker: never read
        w.register(off)
    w.complete(11, "b")
    w.complete(13, "c")
    assert w.finished(10) == [(11, "b"), (13, "c")]
    assert w.progress_after([11, 13]) == Progress(10, frozenset({11, 13}))
    assert w.commit([11, 13]) == 0  # 10 still runs: the position stays
    assert w.finished(10) == []
    w.complete(10, "a")
    assert w.progress_after([10]) == Progress(14, frozenset())
    assert w.commit([10]) == 3
    assert len(w) == 1 and not w.has_work()


def test_finished_respects_the_limit_lowest_first() -> None:
    w: Window[int] = Window()
    for off in range(5):
        w.register(off)
    for off in (4, 1, 3):
        w.complete(off, off)
    assert w.finished(2) == [(1, 1), (3, 3)]


def test_done_from_an_earlier_run_passes_without_a_result() -> None:
    w: Window[str] = Window()
    w.register(0)
    w.register(1, done=True)
    w.register(2, done=True)
    assert not w.has_work()
    w.complete(0, "a")
    assert w.progress_after([0]) == Progress(3, frozenset())
    assert w.commit([0]) == 3


def test_done_at_the_head_is_work_on_its_own() -> None:
    w: Window[str] = Window()
    w.register(7, done=True)
    w.register(8)
    assert w.has_work()
    assert w.progress_after([]) == Progress(8, frozenset())
    assert w.commit([]) == 1


def test_everything_done_moves_past_the_last_offset() -> None:
    w: Window[str] = Window()
    w.register(3)
    w.complete(3, "x")
    assert w.progress_after([3]) == Progress(4, frozenset())
    assert Window().progress_after([]) is None


def test_offsets_must_increase() -> None:
    w: Window[int] = Window()
    w.register(5)
    with pytest.raises(ValueError, match="not after"):
        w.register(5)


def test_progress_round_trip_and_ranges() -> None:
    p = Progress(100, frozenset({101, 102, 103, 107, 110, 111}))
    assert ranges(p.done) == [[101, 103], [107, 107], [110, 111]]
    assert Progress.decode(p.encode()) == p
    assert Progress.decode(b'{"next_line": 42}') == Progress(42)


@given(st.integers(1, 200), st.integers(0, 2**32))
def test_every_offset_committed_once_and_position_never_passes_a_gap(n: int, seed: int) -> None:
    """Commits at random moments: outputs once each; the position never passes an uncommitted offset;
    a restart from any committed progress would skip exactly the committed offsets."""
    rng = random.Random(seed)
    w: Window[int] = Window()
    for off in range(n):
        w.register(off)
    finish = list(range(n))
    rng.shuffle(finish)
    committed: list[int] = []

    def commit() -> None:
        taken = [off for off, _ in w.finished(rng.randint(1, n))]
        progress = w.progress_after(taken)
        committed.extend(taken)
        w.commit(taken)
        if progress is not None:
            below = set(range(progress.next))
            assert below <= set(committed)
            assert progress.done == set(committed) - below
        assert len(committed) == len(set(committed))

    for off in finish:
        w.complete(off, off)
        if rng.random() < 0.3:
            commit()
    while w.has_work():
        commit()
    assert sorted(committed) == list(range(n))
    assert len(w) == 0


def test_done_offsets_not_read_yet_stay_in_the_progress() -> None:
    """A restart's first read may stop before the offsets an earlier run committed ahead; a progress
    written meanwhile must still hold them, or a second crash would have them called again."""
    w: Window[str] = Window(ahead={105, 106})
    for off in range(100, 104):
        w.register(off)
        w.complete(off, "x")
    assert w.progress_after(range(100, 104)) == Progress(104, frozenset({105, 106}))
    w.commit(range(100, 104))
    w.register(104)
    w.register(105)
    assert w.done == {105} and w.ahead == {106}
    w.complete(104, "y")
    assert w.progress_after([104]) == Progress(106, frozenset({106}))  # read from 106, and skip it
