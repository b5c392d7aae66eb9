"""bench.kafka_client_cost's pure parts: the rows both produce paths write, the checks a run must pass,
the per-record figures and ratios, and its options."""

from __future__ import annotations

import argparse

import pytest

from bench import kafka_client_cost as kcc
from gpu_stage.transform.packed import encode_headers
from llmpipe import headers


def test_the_raw_records_carry_every_connector_header() -> None:
    assert [name for name, _ in kcc.CONNECTOR_HEADERS] == list(headers.ALL)


def test_both_produce_paths_write_the_same_transactions_of_rows() -> None:
    """Values cycled from the pool, one key per row, partitions round robin, ``batch`` rows per transaction."""
    pieces = kcc._pieces(5, 2, 3, [b"a", "é中".encode()])
    assert pieces == [
        ([b"a", "é中".encode()], [b"req-000000000", b"req-000000001"], [0, 1]),
        ([b"a", "é中".encode()], [b"req-000000002", b"req-000000003"], [2, 0]),
        ([b"a"], [b"req-000000004"], [1]),
    ]


def test_headers_are_counted_in_the_packed_encoding() -> None:
    records = [[("latency.ms", b"12"), ("model", None)], [], [("attributes", b"")], list(kcc.CONNECTOR_HEADERS)]
    encoded = b"".join(encode_headers(h) for h in records)
    assert kcc.count_headers(encoded) == 2 + 0 + 1 + 7
    assert kcc.count_headers(b"") == 0


def test_a_consume_run_must_read_every_record_its_bytes_and_headers() -> None:
    whole = {"records": 10, "value_bytes": 1000, "headers": 70, "cpu_s": 0.1}
    kcc.check_consume(whole, 10, 1000)
    for short in ({"records": 9}, {"value_bytes": 999}, {"headers": 60}):
        with pytest.raises(RuntimeError, match="consume run read"):
            kcc.check_consume({**whole, **short}, 10, 1000)


def test_figures_per_record_and_native_over_python() -> None:
    def run(cpu_s: float) -> dict[str, float]:
        return {"records": 200_000, "cpu_s": cpu_s}

    rounds = [{"consume_python": run(1.6), "consume_native": run(0.8), "produce_python": run(1.0),
               "produce_native": run(0.75)}]  # fmt: skip
    args = argparse.Namespace(records=200_000, partitions=4, batch=50_000)
    row = kcc.summarize(args, rounds)["rounds"][0]
    assert row["consume_python_us_per_record"] == 8.0
    assert row["consume_native_us_per_record"] == 4.0
    assert row["produce_python_us_per_record"] == 5.0
    assert row["produce_native_us_per_record"] == 3.75
    assert row["consume_native_over_python"] == 0.5
    assert row["produce_native_over_python"] == 0.75
    assert row["saved_us_per_record"] == 5.25


def test_a_baseline_without_cpu_time_has_no_ratio() -> None:
    assert kcc.ratio(1.0, 0.0) is None
    assert kcc.ratio(1.0, 4.0) == 0.25


@pytest.mark.parametrize("option", ["--records", "--partitions", "--batch", "--pool", "--rounds"])
def test_counts_below_one_are_refused(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        kcc.parse_args([option, "0"])
    assert stop.value.code == 2
    assert f"{option} must be at least 1" in capsys.readouterr().err
