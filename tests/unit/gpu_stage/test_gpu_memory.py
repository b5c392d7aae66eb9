"""Where RMM is missing, numba is left as it is (no GPU stack here) and the GPU backend cannot start.

With RMM and a GPU, ``tests/gpu/test_gpu_memory_cap.py`` checks that the device lane's buffers come
from the capped pool.
"""

from __future__ import annotations

import importlib.util

import pytest


def test_without_rmm_numba_is_not_pointed_at_it() -> None:
    pytest.importorskip("numba")
    if importlib.util.find_spec("rmm") is not None:
        pytest.skip("RMM is installed here: tests/gpu/test_gpu_memory_cap.py covers the pool")
    from gpu_stage.transform.cudf.device import numba_from_pool, unusable_reason

    assert numba_from_pool() is False
    assert unusable_reason() is not None
