"""``python -m bench.lane_share``: which bodies of a bench corpus the device lane leaves to the native core, and why.

The device lane takes the bodies inside its subset, upstream error bodies and content the schema
rejects included; the others (the other dead letters, JSON outside the subset) go to the native
core, whose time on its threads bounds the GPU backend where that share is large. This runs pass 1
of the lane compiled for the CPU (the device's code, so the same rows) over a generated corpus and
sorts the rows it leaves by what the native core made of them: each dead letter by its reason, each
row with invalid content by its error code's kind, the rest as outside the lane's subset. No GPU
needed; not a speed figure.
"""

from __future__ import annotations

import argparse
import io
import logging
from collections import Counter
from pathlib import Path
from typing import Any, cast

import fastavro
import numpy as np

from bench import corpus
from bench.transform import write_result
from gpu_stage.synth import batch
from gpu_stage.transform import NativeBackend, TransformSettings
from gpu_stage.transform.device import NOT_TAKEN, CpuExecutor, LaneFound, LaneTransform
from llmpipe.runtime import configure_logging

log = logging.getLogger("bench.lane_share")


def share(values: list[bytes], settings: TransformSettings | None = None) -> dict[str, Any]:
    """The rows of ``values`` (one batch) the lane leaves, counted by what the native core made of them."""
    settings = settings or TransformSettings()
    raw = batch(values)
    sizes = LaneTransform(settings, CpuExecutor).measure(raw)
    left = np.flatnonzero(sizes == NOT_TAKEN).tolist()
    result = NativeBackend(settings).parse(raw)
    dead = {b.offset: b for b in result.bad}
    encoded = result.encoded
    row_at = {int(r): k for k, r in enumerate(encoded.rows)}
    schema = fastavro.parse_schema(settings.record.avro)
    kinds: Counter[str] = Counter()
    for r in left:
        offset = raw.offsets[r]
        if offset in dead:
            kinds[f"dead letter: {dead[offset].reason.value}"] += 1
            continue
        k = row_at[r]
        datum = bytes(encoded.buf[encoded.offsets[k] : encoded.offsets[k + 1]])
        row = cast("dict[str, Any]", fastavro.schemaless_reader(io.BytesIO(datum), schema))
        if row.get("content_valid") is False:
            kinds[f"content invalid: {str(row.get('content_error')).split(':')[0]}"] += 1
        else:
            kinds["outside the lane's subset"] += 1
    return {
        "records": len(values),
        "left_to_native": len(left),
        "left_share": round(len(left) / max(len(values), 1), 4),
        "dead_letters": len(result.bad),
        "dead_letters_of_the_lane": len(LaneFound.of(sizes)),
        "by_kind": dict(kinds.most_common()),
    }


def main(argv: list[str] | None = None) -> int:
    """Generate the corpus, count, print, write the JSON."""
    configure_logging("INFO")
    p = argparse.ArgumentParser(prog="python -m bench.lane_share", description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=corpus.CorpusConfig.seed)
    p.add_argument("--sizes", type=corpus.parse_sizes, default=corpus.SIZES,
                   help="body size mix, e.g. 1024:1 for 1 KB only")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    cfg = corpus.CorpusConfig(records=args.records, seed=args.seed, sizes=args.sizes)
    generated = corpus.generate(cfg)
    result = {"corpus": generated.config} | share(generated.values)
    log.info("left to the native core: %d of %d (%.2f %%)", result["left_to_native"], result["records"],
             100 * result["left_share"])  # fmt: skip
    for kind, count in result["by_kind"].items():
        log.info("  %6d  %s", count, kind)
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
