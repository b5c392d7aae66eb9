"""GPU tier: the device lane's CUDA kernels are kept on disk, and a second process loads them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.gpu_parity import REASON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"no usable GPU: {REASON}")]

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
from pathlib import Path
from gpu_stage import synth
from gpu_stage.backends.base import TransformSettings
from gpu_stage.backends.gpu import GpuBackend
from gpu_stage.backends.native import NativeBackend

settings = TransformSettings(kernel_cache=Path(sys.argv[1]))
batch = synth.batch(synth.bodies(2000))
backend = GpuBackend(settings)
got = backend.parse(batch)
fns = backend.lane.executor.fns
stats = [fns.measure.stats, fns.write.stats]
print(json.dumps({
    "hits": sum(sum(s.cache_hits.values()) for s in stats),
    "misses": sum(sum(s.cache_misses.values()) for s in stats),
    "same": bytes(got.encoded.buf) == bytes(NativeBackend(settings).parse(batch).encoded.buf),
}))
"""


def _probe(cache: Path) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE, str(cache)], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_second_process_loads_the_kernels_the_first_compiled(tmp_path: Path) -> None:
    first = _probe(tmp_path)
    assert first["same"] and first["hits"] == 0
    folders = list(tmp_path.glob("lane-cuda-*"))
    assert len(folders) == 1 and any(folders[0].rglob("*.nbi"))
    second = _probe(tmp_path)
    assert second["same"] and second["hits"] == 2 and second["misses"] == 0
