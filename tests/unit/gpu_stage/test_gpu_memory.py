"""Without RMM, the GPU backend's start says the device lane's buffers are outside the capped pool.

With RMM and a GPU, ``tests/gpu/test_gpu_memory_cap.py`` checks that they come from it.
"""

from __future__ import annotations

import importlib.util
import logging

import pytest


def test_without_rmm_the_lanes_buffers_are_said_to_be_outside_the_pool(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("numba")
    if importlib.util.find_spec("rmm") is not None:
        pytest.skip("RMM is installed here: tests/gpu/test_gpu_memory_cap.py covers the pool")
    from gpu_stage.backends.gpu import numba_from_pool

    with caplog.at_level(logging.WARNING, logger="gpu_stage.backends.gpu"):
        numba_from_pool()
    assert "outside the capped GPU pool" in caplog.text
    assert "rmm" in caplog.text
