"""The CUDA device as cuDF and RMM see it: is it usable, and the memory pool every device buffer comes from.

vLLM shares the card, so every device allocation (cuDF's and the device lane's numba buffers) comes
from one RMM pool capped at ``--gpu-pool-bytes``.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)

_POOL_STEP = 256


def load() -> Any:
    """Import cuDF lazily, so this module imports on hosts without it; numba is pointed at RMM first."""
    if "cudf" not in sys.modules:
        numba_from_pool()
    return importlib.import_module("cudf")


def unusable_reason() -> str | None:
    """Why this backend cannot run here (no cuDF, no device answering), or None when it can."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip() == "-1":
        return "CUDA_VISIBLE_DEVICES=-1 hides every GPU"
    try:
        cudf = load()
    except Exception as exc:
        return f"cuDF is not importable ({type(exc).__name__}: {exc})"
    try:
        total = int(cudf.Series([1, 2]).sum())
    except Exception as exc:
        return f"no CUDA device answered ({type(exc).__name__}: {exc})"
    return None if total == 3 else "the CUDA device returned a wrong result"


def cap_memory(pool_bytes: int) -> None:
    """Make every device allocation come from a pool capped at ``pool_bytes`` (vLLM shares the card)."""
    rmm = importlib.import_module("rmm")
    size = max(_POOL_STEP, pool_bytes - pool_bytes % _POOL_STEP)
    try:
        pool = rmm.mr.PoolMemoryResource(
            rmm.mr.CudaMemoryResource(), initial_pool_size=min(size, 256 << 20), maximum_pool_size=size
        )
        resource = rmm.mr.LimitingResourceAdaptor(pool, size)
    except (TypeError, ValueError, RuntimeError, MemoryError) as exc:
        msg = f"cannot create a GPU memory pool of {size} bytes: {exc}"
        raise ConfigError(msg) from exc
    rmm.mr.set_current_device_resource(resource)
    if not _numba_in_pool():
        log.warning("the device lane's buffers are outside the capped GPU pool: numba's CUDA context came first")
    log.info("gpu memory pool capped at %d bytes", size)


def numba_from_pool() -> bool:
    """Make numba-cuda's device arrays (the device lane's buffers) come from RMM's current resource.

    numba allocates with the CUDA driver unless told otherwise, so without this the lane's buffers
    (several times a batch's bytes for two in flight) would sit outside the cap. It must come before numba makes its
    CUDA context (a context keeps the allocator it was made with), hence before cuDF is first
    imported. False where RMM or numba-cuda is missing (no GPU stack here) or refuses the plugin.
    """
    found = _numba_and_rmm()
    if found is None:
        return False
    cuda, manager = found
    try:
        cuda.set_memory_manager(manager)
    except (AttributeError, RuntimeError) as exc:
        log.warning("the device lane's buffers are outside the capped GPU pool: %s", exc)
        return False
    return True


def _numba_in_pool() -> bool:
    """Whether numba's CUDA context allocates through RMM (made now if there is none yet)."""
    found = _numba_and_rmm()
    if found is None:
        return False
    cuda, manager = found
    try:
        return isinstance(cuda.current_context().memory_manager, manager)
    except (AttributeError, RuntimeError):
        return False


def _numba_and_rmm() -> tuple[Any, Any] | None:
    """``numba.cuda`` and RMM's numba plugin class; None where either is missing (no GPU stack here)."""
    try:
        return importlib.import_module("numba.cuda"), importlib.import_module("rmm.allocators.numba").RMMNumbaManager
    except ImportError as exc:
        log.debug("numba not pointed at RMM: %s", exc)
        return None


