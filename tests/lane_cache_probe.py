"""Two processes on one kernel cache folder: what numba's dispatchers of the device lane did in each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Parse generated bodies with the lane, then report the cache hits and misses of its strings pass
# (the warp build's) and its two passes (the ordered kernels where the lane's default order makes one).
PROBE = """
import json, sys
from pathlib import Path
from gpu_stage import synth
from gpu_stage.transform.api import ORDERED_LANES, TransformSettings
from gpu_stage.transform.native import NativeBackend
{imports}

settings = TransformSettings(kernel_cache=Path(sys.argv[1]))
batch = synth.batch(synth.bodies(int(sys.argv[2])))
backend = {backend}(settings)
got = backend.parse(batch)
fns = backend.lane.executor.fns
passes = ("measure_ordered", "write_ordered") if settings.lane_order in ORDERED_LANES else ("measure", "write")
mark = backend.lane.executor.mark
stats = [getattr(mark, "dispatcher", mark).stats] + [getattr(fns, name).stats for name in passes]
print(json.dumps({{
    "hits": sum(sum(s.cache_hits.values()) for s in stats),
    "misses": sum(sum(s.cache_misses.values()) for s in stats),
    "same": bytes(got.encoded.buf) == bytes(NativeBackend(settings).parse(batch).encoded.buf),
    "module": fns.measure.py_func.__module__,
}}))
"""
BACKENDS = {
    "cpu": ("from gpu_stage.transform.device.lane import CpuLaneBackend", "CpuLaneBackend"),
    "cuda": ("from gpu_stage.transform.gpu import GpuBackend", "GpuBackend"),
}


def probe(target: str, cache: Path, bodies: int = 200) -> dict[str, object]:
    """Run the lane for ``target`` (``cpu`` or ``cuda``) in a fresh process on ``cache``; its report."""
    imports, backend = BACKENDS[target]
    script = PROBE.format(imports=imports, backend=backend)
    done = subprocess.run([sys.executable, "-c", script, str(cache), str(bodies)], cwd=ROOT, capture_output=True,
                          text=True, check=False, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
