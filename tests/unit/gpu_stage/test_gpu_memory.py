"""Where RMM is missing, numba is left as it is (no GPU stack here) and the GPU backend cannot start.

The worker's pool cap by default is the GPU backend's, which the benchmarks build.

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


def test_the_worker_and_the_gpu_backend_cap_the_pool_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmarks build the GPU backend with its default; the worker must run with the same cap."""
    import inspect

    from gpu_stage.settings import parse
    from gpu_stage.transform.gpu import GpuBackend

    monkeypatch.delenv("GPU_STAGE_GPU_POOL_BYTES", raising=False)
    backend_default = inspect.signature(GpuBackend).parameters["pool_bytes"].default
    assert parse([])[1].gpu_pool_bytes == backend_default == 2 * 1024**3
    assert parse(["--gpu-pool-bytes", "4294967296"])[1].gpu_pool_bytes == 4 * 1024**3
    monkeypatch.setenv("GPU_STAGE_GPU_POOL_BYTES", "1073741824")
    assert parse([])[1].gpu_pool_bytes == 1024**3
