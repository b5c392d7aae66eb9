"""The dead-letter policy: when bad records stop being dead letters and fail the batch instead.

A few bad records go to the DLQ; ``--on-bad fail`` stops at the first, and a batch in which more
than ``--max-bad-ratio`` of the records are bad points at a wrong content schema or a wrong input
topic rather than at bad records, so it fails too (its transaction is aborted) instead of filling
the DLQ with good input.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_stage.settings import WorkerSettings
from llmpipe.dlq import BadRecord
from llmpipe.errors import ParseError


def check_bad(bad: Sequence[BadRecord], n: int, settings: WorkerSettings) -> None:
    """Raise ``ParseError`` when ``bad`` must fail the batch: ``n`` records for the ratio (0: only ``--on-bad``)."""
    s = settings
    if bad and s.on_bad == "fail":
        first = bad[0]
        msg = f"bad record at {first.topic}[{first.partition}]@{first.offset}: {first.reason}: {first.error}"
        raise ParseError(msg)
    if n >= s.min_batch_for_ratio and len(bad) / n > s.max_bad_ratio:
        msg = (
            f"{len(bad)} of {n} records in one batch are bad (> {s.max_bad_ratio:.0%}): "
            "check the input topic and the content schema"
        )
        raise ParseError(msg)
