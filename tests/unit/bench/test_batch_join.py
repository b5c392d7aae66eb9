"""bench.batch_join: both ways of joining a batch's consume calls hold the same records."""

from __future__ import annotations

from bench import batch_join


def test_both_ways_join_the_same_records_and_each_is_timed() -> None:
    result = batch_join.measure(records=300, calls=3, batches=2, rounds=1, seed=7)
    assert result["records"] == 300 and result["calls"] == 3
    assert result["fresh_arrays_us_per_record"] > 0 and result["pooled_buffer_us_per_record"] > 0
    assert result["baseline"] == "fresh_arrays" and result["ratio"] > 0


def test_the_consume_calls_split_the_records_in_order() -> None:
    records = batch_join.consumed(10, 3, seed=7)
    assert [len(part) for part in records.parts] == [4, 4, 2]
    assert [int(o) for part in records.parts for o in part.offsets] == list(range(10))
