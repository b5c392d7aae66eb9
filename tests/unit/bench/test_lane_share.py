"""``bench.lane_share``: the rows the device lane leaves, sorted by what the native core made of them."""

from __future__ import annotations

import pytest

pytest.importorskip("numba")

from bench import corpus
from bench.lane_share import share
from gpu_stage import synth


def test_every_dead_letter_is_the_lanes_or_left_and_counted_by_its_reason() -> None:
    values = corpus.generate(corpus.CorpusConfig(records=600, sizes=((1024, 1.0),))).values
    got = share(values)
    dead = {k: n for k, n in got["by_kind"].items() if k.startswith("dead letter: ")}
    assert "dead letter: upstream_error" not in dead
    assert got["dead_letters_of_the_lane"] > 0
    assert sum(dead.values()) + got["dead_letters_of_the_lane"] == got["dead_letters"]
    assert sum(dead.values()) > 0
    assert sum(got["by_kind"].values()) == got["left_to_native"] <= got["records"] == 600


def test_the_lanes_own_subset_is_taken_whole() -> None:
    # Known shapes: two good synthetic bodies, an upstream error body, content the schema rejects and a
    # cut body (the lane's), then a body whose id has the wrong type (the native core's).
    good = synth.bodies(2)
    error = b'{"error": {"message": "overloaded", "code": 503}}'
    rejected = (
        b'{"id":"c","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"[1, 2]"},"finish_reason":"stop"}]}'
    )
    truncated = error[:-1]
    wrong_id = rejected.replace(b'"id":"c"', b'"id":5')
    got = share([*good, error, rejected, truncated, wrong_id])
    assert got["left_to_native"] == 1
    assert got["dead_letters_of_the_lane"] == 2
    assert got["by_kind"] == {"dead letter: wrong_type": 1}
