"""The interface every parsing backend implements, and the settings they share.

A backend turns one :class:`RawBatch` into a :class:`ParseResult`; it never talks to Kafka and never
reads the clock, so the same batch always gives the same bytes and the same dead letters, whichever
backend runs (``gpu_stage/semantics.md`` is the contract both implement).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gpu_stage.batch import ParseResult, RawBatch
from llmpipe.dlq import BadRecord, Reason
from llmpipe.record import TypedRecord

STAGE = "gpu_stage"
DEFAULT_MAX_RECORD_BYTES = 1 << 20


@dataclass(frozen=True)
class TransformSettings:
    """What a backend needs to know: the typed record (content schema) and the size limit."""

    record: TypedRecord = field(default_factory=TypedRecord.from_file)
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    stage: str = STAGE


@runtime_checkable
class Backend(Protocol):
    """A batch parser: raw bodies in, Avro datums of good rows plus dead letters out."""

    @property
    def name(self) -> str:
        """Short backend name for logs and metrics (``cpu``, ``gpu``)."""
        ...

    def parse(self, batch: RawBatch) -> ParseResult:
        """Parse and encode one batch; every position ends up good or as exactly one dead letter."""
        ...


def dead_letter(batch: RawBatch, i: int, stage: str, reason: Reason, text: str) -> BadRecord:
    """The dead letter of batch position ``i``: its raw bytes, key, headers and position, and why."""
    return BadRecord(
        raw=batch.values[i],
        stage=stage,
        reason=reason,
        error=text,
        key=batch.keys[i],
        topic=batch.topic,
        partition=int(batch.partitions[i]),
        offset=int(batch.offsets[i]),
        source_headers=tuple(batch.headers[i]),
    )
