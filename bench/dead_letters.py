"""What a batch's dead letters cost the native core's share of the device lane, made now or when read.

``python -m bench.dead_letters --records 100000 --out bench/results/dead-letters-vm.json`` packs
generated bodies (:mod:`gpu_stage.synth`, about 2 % of them upstream errors) and times
``NativeBackend.run_packed`` on the dead-letter positions, as the device lane hands them over: the
call alone (the records stay in the batch until read) against the call plus reading every dead
letter (what the call cost when it made the records itself; the baseline). Best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.transform import write_result
from gpu_stage.runtime import tune_process
from gpu_stage.synth import SynthConfig, batch, bodies
from gpu_stage.transform import NativeBackend, PackedBatch, TransformSettings


def measure(records: int, rounds: int, seed: int) -> dict[str, Any]:
    """Best seconds of the call alone and of the call plus reading every dead letter, on one batch."""
    values = bodies(records, SynthConfig(seed=seed))
    packed = PackedBatch.of(batch(values))
    native = NativeBackend(TransformSettings())
    dead_at = np.array([i for i, v in enumerate(values) if v.startswith(b'{"error"')], dtype=np.int64)
    call, read = float("inf"), float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        found = native.run_packed(packed, dead_at)[3]
        called = time.perf_counter()
        made = list(found)
        done = time.perf_counter()
        call, read = min(call, called - start), min(read, done - start)
    assert len(made) == len(dead_at)
    return {
        "records": records,
        "dead_letters": len(dead_at),
        "rounds": rounds,
        "call_ms": round(call * 1e3, 3),
        "call_and_read_ms": round(read * 1e3, 3),
        "call_us_per_dead_letter": round(call * 1e6 / max(len(dead_at), 1), 3),
        "baseline": "call_and_read",
        "ratio": round(read / call, 2) if call else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: print the figures, write them as JSON with ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seed", type=int, default=SynthConfig.seed)
    parser.add_argument("--out", type=Path, default=None, help="write the result JSON here")
    args = parser.parse_args(argv)
    tune_process()
    result = measure(args.records, args.rounds, args.seed)
    sys.stdout.write(
        f"{result['dead_letters']} dead letters of {result['records']} records: the call {result['call_ms']} ms, "
        f"with every record read {result['call_and_read_ms']} ms ({result['ratio']}x), best of {result['rounds']}\n"
    )
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
