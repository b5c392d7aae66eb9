"""gpu_stage's backends on the bench corpus: throughput, per-batch latency and the value checksum.

Timing is :func:`bench.transform.time_batches` (one warm-up batch, then each ``parse`` call
timed alone), so these figures and ``python -m bench.transform``'s mean the same thing.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.checksum import Checksum, of_avro
from bench.transform import time_batches, time_stream
from gpu_stage.synth import batch
from gpu_stage.transform import Backend, PackedBatch, RawBatch, StreamBackend, TransformSettings
from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)

POOL_BYTES = 32 << 30
"""GPU memory pool cap for bench runs (the card is not shared with vLLM here; the device lane holds two
1 M-record batches of 2 KB bodies in flight)."""


def build(name: str, settings: TransformSettings) -> tuple[Backend | None, str | None]:
    """The backend called ``name`` via ``select.by_name``, or (None, why not) when it cannot run here."""
    from gpu_stage.transform import backends as select

    if name == "gpu":
        reason = select.gpu_unusable_reason()
        if reason is not None:
            return None, reason
    try:
        return select.by_name(name, settings, pool_bytes=POOL_BYTES), None
    except ConfigError as exc:
        return None, str(exc)


def batches(values: list[bytes], batch_size: int, min_records: int = 0) -> list[RawBatch]:
    """Batches of ``batch_size`` over ``values``, cycled until ``min_records`` are covered.

    Cycling lets a sweep reach 1M-record batches from a smaller corpus; offsets stay distinct.
    """
    total = max(len(values), min_records)
    total = max(batch_size, total - total % batch_size) if total >= batch_size else total
    source = itertools.islice(itertools.cycle(values), total)
    out = []
    for start in range(0, total, batch_size):
        chunk = list(itertools.islice(source, batch_size))
        out.append(batch(chunk, first_offset=start))
    return out


@dataclass
class BackendRun:
    """One backend over a list of batches."""

    name: str
    batch_size: int
    records: int
    input_bytes: int
    seconds: float
    latencies_s: list[float] = field(default_factory=list)
    sha256: str = ""
    checksum: Checksum | None = None
    slow_lane_fraction: float | None = None
    stage_seconds: dict[str, float] | None = None
    pass_seconds: list[float] = field(default_factory=list)

    def latency_ms(self, q: float) -> float:
        """Per-batch latency percentile in ms."""
        return round(float(np.percentile(self.latencies_s, q)) * 1000, 3)

    def as_dict(self) -> dict[str, Any]:
        """Result JSON entry."""
        return {
            "engine": f"gpu_stage-{self.name}",
            "batch_size": self.batch_size,
            "batches": len(self.latencies_s),
            "records": self.records,
            "input_bytes": self.input_bytes,
            "seconds": round(self.seconds, 4),
            "records_per_s": round(self.records / self.seconds, 1),
            "input_mb_per_s": round(self.input_bytes / 1e6 / self.seconds, 2),
            "batch_latency_ms_p50": self.latency_ms(50),
            "batch_latency_ms_p99": self.latency_ms(99),
            "output_sha256": self.sha256,
            "slow_lane_fraction": self.slow_lane_fraction,
            "stage_seconds": self.stage_seconds,
            "passes": max(1, len(self.pass_seconds)),
            "pass_seconds": self.pass_seconds,
            "checksum": None if self.checksum is None else self.checksum.as_dict(),
        }


def run(
    backend: Backend,
    raw: list[RawBatch],
    with_checksum: bool,
    settings: TransformSettings,
    packed: bool = False,
    passes: int = 1,
) -> BackendRun:
    """Time ``backend`` over ``raw``; optionally decode its output for the value checksum (untimed).

    With ``packed`` the batches are packed first (untimed) into the backend's input buffers, as a fetch
    into them would leave them, and streamed through the backend
    (:func:`bench.transform.time_stream`); its name gets ``-packed``. With several
    ``passes`` the figures are those of the median pass, and every pass's seconds are kept.
    """
    if packed:
        if not isinstance(backend, StreamBackend):
            msg = f"backend {backend.name} does not take packed batches"
            raise ConfigError(msg)
        packed_batches = [PackedBatch.of(b, backend.input_buffer) for b in raw]
        timed = time_stream(backend, packed_batches, keep=with_checksum, passes=passes)
    else:
        timed = time_batches(backend, raw, keep=with_checksum, passes=passes)
    out = BackendRun(
        name=backend.name + ("-packed" if packed else ""),
        batch_size=len(raw[0]),
        records=sum(len(b) for b in raw),
        input_bytes=sum(sum(map(len, b.values)) for b in raw),
        seconds=sum(timed.seconds),
        latencies_s=timed.seconds,
        sha256=timed.sha256,
    )
    out.slow_lane_fraction = timed.slow_fraction
    out.stage_seconds = timed.stage_seconds  # the device lane's stages over the timed batches
    out.pass_seconds = timed.pass_seconds
    if with_checksum:
        total = Checksum()
        for result in timed.results:
            total = total + of_avro((v for _, _, v in result.encoded.items()), len(result.bad),
                                    settings.record.avro)
        out.checksum = total
    return out
