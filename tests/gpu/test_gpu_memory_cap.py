"""GPU tier: the device lane's buffers come from the capped RMM pool, so the cap holds for them too.

Run in a fresh process: numba keeps the allocator of the CUDA context it made first, and other GPU
tests in this process make lanes without a backend (and so without the pool).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.gpu.gpu_parity import REASON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"no usable GPU: {REASON}")]

PROBE = """
import json
import numpy as np
from numba import cuda
from rmm.allocators.numba import RMMNumbaManager
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.gpu import GpuBackend

backend = GpuBackend(TransformSettings(), pool_bytes=1 << 30)
out = {"lane": backend.lane is not None,
       "rmm": isinstance(cuda.current_context().memory_manager, RMMNumbaManager)}
try:
    cuda.device_array(2 << 30, dtype=np.uint8)
    out["over_cap"] = "allocated"
except Exception as exc:
    out["over_cap"] = type(exc).__name__
print(json.dumps(out))
"""


def test_the_lanes_device_arrays_come_from_the_capped_pool() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["lane"] and got["rmm"]
    assert got["over_cap"] != "allocated"  # 2 GiB from a 1 GiB pool: refused, where the driver would allow it
