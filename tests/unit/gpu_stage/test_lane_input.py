"""Packing a batch for the device lane: values back to back in a reused buffer that grows when needed."""

from __future__ import annotations

import numpy as np

from gpu_stage import synth
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.device.columns import LaneInput
from gpu_stage.transform.device.executor import Executor
from gpu_stage.transform.device.merge import int_columns
from gpu_stage.transform.native import NativeBackend

CORE = NativeBackend(TransformSettings())._core


def _packed(executor: Executor, values: list[bytes]) -> LaneInput:
    batch = synth.batch(values)
    return LaneInput.of(CORE, batch, executor.staging, int_columns(batch))


def test_values_land_back_to_back_and_the_buffer_grows_only_when_a_batch_needs_it() -> None:
    executor = Executor()
    small = synth.bodies(50)
    first = _packed(executor, small)
    assert first.values.tobytes() == b"".join(small)
    assert first.value_ends.tolist() == np.cumsum([len(v) for v in small]).tolist()
    buffer = executor._held["staging.0"]
    assert buffer is not None
    assert len(buffer) == len(b"".join(small)) + 1  # grown from nothing to exactly this batch

    again = _packed(executor, small[:20])  # smaller: the same buffer serves
    assert executor._held["staging.0"] is buffer
    assert again.values.tobytes() == b"".join(small[:20])

    large = synth.bodies(6_000)  # over 4 MiB: the native core copies with two threads
    grown = _packed(executor, large)
    assert executor._held["staging.0"] is not buffer
    assert grown.values.tobytes() == b"".join(large)
    assert grown.value_ends[-1] == sum(map(len, large))
    assert grown.key_ends[-1] == len(grown.keys) and len(grown.header_ends) == len(large)


def test_an_empty_value_and_a_batch_of_empty_values() -> None:
    executor = Executor()
    packed = _packed(executor, [b"", b"{}", b""])
    assert packed.values.tobytes() == b"{}"
    assert packed.value_ends.tolist() == [0, 2, 2]
    nothing = _packed(executor, [b"", b""])
    assert nothing.value_ends.tolist() == [0, 0]
