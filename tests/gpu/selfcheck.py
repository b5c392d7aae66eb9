"""Fast first check on a GPU host, before the long runs: the device path works and matches the CPU.

``python -m tests.gpu.selfcheck`` reads 2,000 generated bodies (plus the shared vectors) through the
GPU backend (device pre-screen, pinned device source) and through the earlier path (host pre-screen,
host bytes), compares both with the CPU backend, and exits non-zero on any difference.
"""

from __future__ import annotations

import logging
import sys
import time

from gpu_stage.synth import SynthConfig, batch, bodies
from gpu_stage.transform.contract.reference import ReferenceBackend
from tests.gpu.gpu_parity import REASON, first_difference
from tests.vectors import batch_of, load_vectors

log = logging.getLogger("selfcheck")


def main() -> int:
    """Run the checks; 0 when every one passes."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if REASON is not None:
        log.error("no usable GPU: %s", REASON)
        return 2
    from gpu_stage.transform.gpu import GpuBackend  # only where cuDF is

    cpu, gpu = ReferenceBackend(), GpuBackend(pool_bytes=8 << 30, lane="cudf")
    path = gpu.cudf_path
    assert path is not None
    raws = {"synth": batch(bodies(2000, SynthConfig())), "vectors": batch_of(load_vectors())}
    failed = 0
    log.info("pre-screen on the %s", "device" if path.device_screen is not None else "host")
    for pinned in (True, False):
        saved = path.pinned_stage, path.device_screen
        if not pinned:  # the earlier path: host pre-screen, cuDF reading host bytes
            path.pinned_stage = path.device_screen = None
        for name, raw in raws.items():
            gpu.reset_counters()
            start = time.perf_counter()
            diff = first_difference(cpu.parse(raw), gpu.parse(raw))
            took = time.perf_counter() - start
            log.info(
                "pinned=%s %s: %s (slow lane %.3f, fallbacks %d, %.2f s)",
                pinned, name, "same" if diff is None else diff, gpu.stats.slow_fraction, gpu.stats.slow_batches, took,
            )  # fmt: skip
            failed += diff is not None
        path.pinned_stage, path.device_screen = saved
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
