"""``python -m bench.lane_share``: which bodies of a bench corpus the device lane leaves to the native core, and why.

The device lane takes the bodies inside its subset, upstream error bodies and content the schema
rejects included; the others (the other dead letters, JSON outside the subset) go to the native
core, whose time on its threads bounds the GPU backend where that share is large. This runs pass 1
of the lane compiled for the CPU (the device's code, so the same rows) over a corpus (by default the
real-shaped one, :mod:`bench.corpora`) and sorts the rows it leaves by what the native core made of
them: each dead letter by its reason, each row with invalid content by its error code's kind, the
rest as outside the lane's subset. It also counts, per trait of a body (:mod:`bench.traits`: its
kind, layout, escapes, content, tools), how many of the bodies with it the lane leaves. No GPU
needed; not a speed figure.
"""

from __future__ import annotations

import io
import logging
from collections import Counter
from typing import Any, cast

import fastavro
import numpy as np

from bench import corpora, lane_reasons, traits
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
        why = lane_reasons.reason(values[r])
        if row.get("content_valid") is False:
            kinds[f"content invalid ({str(row.get('content_error')).split(':')[0]}): {why}"] += 1
        else:
            kinds[f"outside the lane's subset: {why}"] += 1
    return {
        "records": len(values),
        "left_to_native": len(left),
        "left_share": round(len(left) / max(len(values), 1), 4),
        "dead_letters": len(result.bad),
        "dead_letters_of_the_lane": len(LaneFound.of(sizes)),
        "by_kind": dict(kinds.most_common()),
        "left_by_trait": left_by_trait(values, left),
    }


def left_by_trait(values: list[bytes], left: list[int]) -> dict[str, list[int]]:
    """Per body trait: [bodies with it the lane leaves, bodies with it], most left first."""
    every = traits.count(values)
    of_left = traits.count(values[r] for r in left)
    return {name: [of_left[name], every[name]] for name in sorted(every, key=lambda n: (-of_left[n], n))}


def main(argv: list[str] | None = None) -> int:
    """Make (or read) the corpus, count, print, write the JSON."""
    configure_logging("INFO")
    args, made = corpora.command("python -m bench.lane_share", __doc__.splitlines()[0], 20_000, argv)
    result = {"corpus": made.facts()} | share(made.values)
    log.info("corpus %s: %d bodies, mean %s B, sha256 %s", made.config.get("corpus", "generated"),
             len(made.values), result["corpus"]["mean_body_bytes"], result["corpus"]["sha256"][:16])  # fmt: skip
    log.info("left to the native core: %d of %d (%.2f %%)", result["left_to_native"], result["records"],
             100 * result["left_share"])  # fmt: skip
    for kind, count in result["by_kind"].items():
        log.info("  %6d  %s", count, kind)
    log.info("left by trait of the body (left / bodies with it):")
    for name, (left, every) in result["left_by_trait"].items():
        log.info("  %6d / %6d  %s", left, every, name)
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
