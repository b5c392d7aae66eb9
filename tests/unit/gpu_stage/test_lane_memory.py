"""The device lane's device memory, estimated before it starts, and the start-time check against the pool."""

from __future__ import annotations

import pytest

from gpu_stage.settings import parse
from gpu_stage.transform.device.memory import lane_bytes
from llmpipe.errors import ConfigError

MEASURED_H100 = 2_079_652_742
"""``device_bytes`` of the lane after 500 k real-shaped bodies in 100 k batches (643,815,097 bytes in
all), three slots, the output in one piece, the bundled schema's 5 properties
(``bench/results/bench-real-spans-ab-1-new-h100.json``)."""


def test_the_estimate_is_within_a_few_percent_of_what_the_lane_held_on_a_gpu() -> None:
    estimate = lane_bytes(643_815_097 // 5, 100_000, 3, 5)
    assert abs(estimate - MEASURED_H100) < 0.03 * MEASURED_H100


def test_each_slot_adds_four_times_the_bytes_and_the_rows_buffers() -> None:
    """The two output buffers are counted once, whatever the slots; more rows or properties cost more."""
    one, two, three = (lane_bytes(1000, 10, slots, 5) for slots in (1, 2, 3))
    assert three - two == two - one > 4 * 1000
    assert one - (two - one) == 2 * 1000
    assert lane_bytes(1000, 20, 1, 5) > lane_bytes(1000, 10, 1, 5)
    assert lane_bytes(1000, 10, 1, 9) > lane_bytes(1000, 10, 1, 5)


def test_the_defaults_fit_the_default_pool() -> None:
    settings = parse(["--backend", "gpu"])[1]
    assert settings.parse_records == 10_000 and settings.lane_slots == 3
    assert lane_bytes(settings.batch_bytes, settings.parse_records, 3, 5) < settings.gpu_pool_bytes / 3


def test_batches_too_large_for_the_pool_are_refused_at_start_in_one_line() -> None:
    """256 MiB batches in three slots need about 3.5 GiB: more than the default 2 GiB pool."""
    with pytest.raises(ConfigError) as refused:
        parse(["--backend", "gpu", "--batch-bytes", str(256 << 20)])
    text = str(refused.value)
    assert "\n" not in text
    named = ("--batch-bytes 268435456", "10000 records a parse call", "--lane-slots 3", "--gpu-pool-bytes 2147483648")
    for option in (*named, "(2 to 4)"):
        assert option in text
    needed = lane_bytes(256 << 20, 10_000, 3, 5)
    assert f"about {needed / 2**30:.2f} GiB" in text


def test_fewer_slots_or_a_larger_pool_let_them_start_and_other_backends_are_not_checked() -> None:
    big = ["--batch-bytes", str(256 << 20)]
    assert parse(["--backend", "gpu", *big, "--gpu-pool-bytes", str(8 << 30)])[1].lane_slots == 3
    assert parse(["--backend", "gpu", *big, "--lane-slots", "2", "--gpu-pool-bytes", str(3 << 30)])[1].lane_slots == 2
    assert parse(["--backend", "cpu", *big])[1].batch_bytes == 256 << 20
