"""The benchmark's device lane settings: parsed from options, checked by name, set on the executor.

Runs without a GPU: the backend here is a plain object whose lane's executor has the lane's attributes.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from bench.transform import (
    LANE_KNOBS,
    add_lane_knobs,
    lane_knob_values,
    lane_knobs,
    make_backend,
    set_lane_knobs,
)
from llmpipe.errors import ConfigError


def _executor() -> SimpleNamespace:
    return SimpleNamespace(write_piece_bytes=12 << 20, headroom_parts=64, write_streams=1, measure_threads=128,
                           write_threads=128, measure_registers=None, write_registers=None)  # fmt: skip


def _backend(executor: object) -> SimpleNamespace:
    return SimpleNamespace(lane=SimpleNamespace(executor=executor))


def _parsed(*argv: str) -> dict[str, int | None]:
    parser = argparse.ArgumentParser()
    add_lane_knobs(parser)
    return lane_knobs(parser.parse_args(list(argv)))


def test_options_name_every_knob_and_default_to_none() -> None:
    assert _parsed() == dict.fromkeys(LANE_KNOBS)


def test_options_set_their_knobs_with_the_piece_in_mib() -> None:
    knobs = _parsed("--write-piece-mib", "16", "--measure-threads", "64", "--write-threads", "256",
                    "--measure-registers", "48")  # fmt: skip
    assert knobs["write_piece_bytes"] == 16 * 1024 * 1024
    assert (knobs["measure_registers"], knobs["write_registers"]) == (48, None)
    assert (knobs["measure_threads"], knobs["write_threads"], knobs["write_streams"]) == (64, 256, None)


def test_given_knobs_are_set_and_the_rest_keep_the_executors_own() -> None:
    executor = _executor()
    set_lane_knobs(_backend(executor), {"measure_threads": 32, "write_piece_bytes": 0, "write_streams": None})
    assert (executor.measure_threads, executor.write_piece_bytes) == (32, 0)
    assert (executor.write_threads, executor.write_streams, executor.headroom_parts) == (128, 1, 64)


def test_an_executor_without_a_knob_is_left_as_it_is() -> None:
    executor = SimpleNamespace(write_streams=1)
    set_lane_knobs(_backend(executor), {"measure_threads": 64, "write_streams": 2})
    assert vars(executor) == {"write_streams": 2}
    assert lane_knob_values(executor) == dict.fromkeys(LANE_KNOBS) | {"write_streams": 2}


def test_a_backend_without_a_device_lane_is_left_as_it_is() -> None:
    backend = SimpleNamespace(name="cpu")
    set_lane_knobs(backend, {"measure_threads": 64})
    assert vars(backend) == {"name": "cpu"}


def test_an_unknown_knob_is_an_error_before_any_backend_is_made() -> None:
    with pytest.raises(ConfigError, match="measure_thread"):
        make_backend("no-such-backend", lane={"measure_thread": 64})
    with pytest.raises(ConfigError, match="blocks"):
        set_lane_knobs(_backend(_executor()), {"blocks": 4})
