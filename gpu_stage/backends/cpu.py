"""The CPU backend: orjson per body, the reference extraction, and the columnar Avro encoder.

It is both a production backend (hosts without a GPU) and the reference the GPU backend must match
byte for byte. Per-record Python is limited to one ``orjson.loads`` and one :func:`extract` call;
encoding is done for the whole batch at once by :class:`gpu_stage.avro_bulk.BulkEncoder`.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import orjson

from gpu_stage import meta
from gpu_stage.avro_bulk import BulkEncoder
from gpu_stage.backends.base import TransformSettings
from gpu_stage.batch import EncodedRows, ParseResult, RawBatch
from gpu_stage.content import ContentValidator
from gpu_stage.extract import BODY_FIELDS, BadBody, extract
from llmpipe.dlq import BadRecord, Reason

log = logging.getLogger(__name__)

NOT_AN_OBJECT_TEXT = "top-level JSON value is not an object"
TOO_LARGE_TEXT = "body larger than max_record_bytes"


def decode_failure(value: bytes) -> tuple[Reason, str]:
    """Why a body did not decode: ``invalid_utf8`` when its bytes are not UTF-8, else ``invalid_json``."""
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return Reason.INVALID_UTF8, "body is not valid UTF-8"
    return Reason.INVALID_JSON, "body is not valid JSON"


class CpuBackend:
    """Parses batches on the CPU; see ``gpu_stage/semantics.md`` for the rules."""

    name = "cpu"

    def __init__(self, settings: TransformSettings | None = None) -> None:
        """Compile the content validator and the Avro encoder once per backend."""
        self.settings = settings or TransformSettings()
        self._validator = ContentValidator(self.settings.record.content_schema)
        self._encoder = BulkEncoder(self.settings.record.avro)
        log.debug("cpu backend ready (schema %s)", self.settings.record.fingerprint)

    def _bad(self, batch: RawBatch, i: int, reason: Reason, text: str) -> BadRecord:
        return BadRecord(
            raw=batch.values[i],
            stage=self.settings.stage,
            reason=reason,
            error=text,
            key=batch.keys[i],
            topic=batch.topic,
            partition=int(batch.partitions[i]),
            offset=int(batch.offsets[i]),
        )

    def parse(self, batch: RawBatch) -> ParseResult:
        """Parse and encode one batch (pure: same batch, same result)."""
        limit = self.settings.max_record_bytes
        validator = self._validator
        loads = orjson.loads
        good: list[tuple[Any, ...]] = []
        positions: list[int] = []
        bad: list[BadRecord] = []
        for i, value in enumerate(batch.values):
            if len(value) > limit:
                bad.append(self._bad(batch, i, Reason.TOO_LARGE, TOO_LARGE_TEXT))
                continue
            try:
                obj = loads(value)
            except orjson.JSONDecodeError:
                bad.append(self._bad(batch, i, *decode_failure(value)))
                continue
            if type(obj) is not dict:
                bad.append(self._bad(batch, i, Reason.NOT_AN_OBJECT, NOT_AN_OBJECT_TEXT))
                continue
            try:
                good.append(extract(obj, validator))
            except BadBody as exc:
                bad.append(self._bad(batch, i, exc.reason, exc.text))
                continue
            positions.append(i)
        return ParseResult(self._encode(batch, good, positions), bad)

    def _encode(self, batch: RawBatch, good: list[tuple[Any, ...]], positions: list[int]) -> EncodedRows:
        n = len(good)
        if n == 0:
            return EncodedRows()
        columns: dict[str, Any] = dict(zip(BODY_FIELDS, map(list, zip(*good, strict=True)), strict=True))
        keys = [batch.keys[i] for i in positions]
        columns["request_id"] = [meta.request_id(k) for k in keys]
        latencies, attrs = meta.header_columns([batch.headers[i] for i in positions])
        columns["latency_ms"] = latencies
        columns["attributes"] = attrs
        columns["raw_partition"] = [int(batch.partitions[i]) for i in positions]
        columns["raw_offset"] = [int(batch.offsets[i]) for i in positions]
        columns["ingest_ts"] = [meta.ingest_ts(int(batch.timestamps_ms[i])) for i in positions]
        buf, offsets = self._encoder.encode_columns(columns, n)
        return EncodedRows(buf, offsets, np.asarray(positions, dtype=np.int64), keys)
