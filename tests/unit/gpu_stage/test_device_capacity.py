"""Grow-only device buffers (:func:`gpu_stage.transform.device.cuda.capacity`): byte buffers get headroom."""

from __future__ import annotations

import numpy as np

from gpu_stage.synth import SynthConfig, bodies
from gpu_stage.transform.device.cuda import HEADROOM_PARTS, capacity


def test_a_byte_buffer_is_allocated_a_64th_larger() -> None:
    assert capacity(100_000_000, np.uint8) == 101_562_500
    assert capacity(64 * 1024 + 63, np.uint8) == 64 * 1024 + 63 + 1024


def test_no_headroom_when_its_parts_are_0() -> None:
    assert capacity(100_000_000, np.uint8, parts=0) == 100_000_000
    assert capacity(100_000_000, np.uint8, parts=8) == 112_500_000


def test_row_buffers_and_tables_are_allocated_as_asked() -> None:
    assert capacity(100_000, np.int64) == 100_000
    assert capacity(100_000, np.float64, 4) == 100_000
    assert capacity(100_000, np.uint8, 8) == 100_000  # a 2-D byte table is sized by its rows


def test_no_buffer_is_smaller_than_1024_items() -> None:
    assert capacity(0, np.uint8) == 1024
    assert capacity(10, np.int64) == 1024


def test_the_headroom_covers_the_spread_of_batches_of_synthetic_bodies() -> None:
    # Ten 10 k batches of the harness's ~1 KB bodies: the largest batch fits a buffer sized for the
    # smallest, so a stream that grew once for its first batch does not grow again.
    values = bodies(100_000, SynthConfig(seed=7))
    spans = [sum(map(len, values[i : i + 10_000])) for i in range(0, len(values), 10_000)]
    assert max(spans) <= capacity(min(spans), np.uint8)
    assert max(spans) > min(spans) * (1 + 1 / (HEADROOM_PARTS * 100))  # they do differ: sized exactly, it would grow
