"""The reference backend: orjson per body, the reference extraction, and the bulk Avro encoder.

It is the executable form of ``gpu_stage/transform/contract/semantics.md``: the native CPU backend and the GPU backend
must match it byte for byte, and the GPU backend runs its rare slow-lane rows through it. Per-record
Python is limited to one ``orjson.loads`` and one :func:`extract` call; encoding is done for the whole
batch at once by :class:`gpu_stage.transform.avro.bulk.BulkEncoder`.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import orjson

from gpu_stage.transform.api import TransformSettings, dead_letter
from gpu_stage.transform.avro.bulk import BulkEncoder
from gpu_stage.transform.batch import EncodedRows, IntColumn, ParseResult, RawBatch
from gpu_stage.transform.contract import meta
from gpu_stage.transform.contract.content import ContentValidator
from gpu_stage.transform.contract.extract import BODY_FIELDS, BadBody, extract
from llmpipe.dlq import BadRecord, Reason

log = logging.getLogger(__name__)

ROW_LAYOUT = BODY_FIELDS + meta.META_FIELDS
"""Row tuples are the body's typed values followed by the record's own (key, headers, position)."""

NOT_AN_OBJECT_TEXT = "top-level JSON value is not an object"
INVALID_UTF8_TEXT = "body is not valid UTF-8"
INVALID_JSON_TEXT = "body is not valid JSON"
TOO_LARGE_TEXT = "body larger than max_record_bytes"


def decode_failure(value: bytes) -> tuple[Reason, str]:
    """Why a body did not decode: ``invalid_utf8`` when its bytes are not UTF-8, else ``invalid_json``."""
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return Reason.INVALID_UTF8, INVALID_UTF8_TEXT
    return Reason.INVALID_JSON, INVALID_JSON_TEXT


class ReferenceBackend:
    """Parses batches in Python; see ``gpu_stage/transform/contract/semantics.md`` for the rules."""

    name = "reference"

    def __init__(self, settings: TransformSettings | None = None) -> None:
        """Compile the content validator and the Avro encoder once per backend."""
        self.settings = settings or TransformSettings()
        self._validator = ContentValidator.of(self.settings.record.content_schema)
        self._encoder = BulkEncoder(self.settings.record.avro)
        log.debug("cpu backend ready (schema %s)", self.settings.record.fingerprint)

    def bad_record(self, batch: RawBatch, i: int, reason: Reason, text: str) -> BadRecord:
        """The dead letter for position ``i`` (public: the GPU backend's slow lane builds the same)."""
        return dead_letter(batch, i, self.settings.stage, reason, text)

    def parse(self, batch: RawBatch) -> ParseResult:
        """Parse and encode one batch (pure: same batch, same result)."""
        body_rows, positions, bad = self._bodies(batch)
        return ParseResult(self.encode_bodies(batch, body_rows, positions), bad)

    def encode_bodies(self, batch: RawBatch, good: list[tuple[Any, ...]], positions: list[int]) -> EncodedRows:
        """Encode body tuples (:data:`BODY_FIELDS`) of the records at ``positions`` (the GPU backend uses it)."""
        rows = self._with_meta(batch, good, positions)
        return self.encode(rows, positions, [batch.keys[i] for i in positions])

    def typed_rows(self, batch: RawBatch) -> tuple[list[tuple[Any, ...]], list[int], list[BadRecord]]:
        """Typed row tuples (laid out as :data:`ROW_LAYOUT`), their batch positions, and dead letters.

        Split from :meth:`parse` so benchmarks can time other encoders on exactly the same rows.
        """
        body_rows, positions, bad = self._bodies(batch)
        return self._with_meta(batch, body_rows, positions), positions, bad

    @staticmethod
    def _with_meta(batch: RawBatch, body_rows: list[tuple[Any, ...]], positions: list[int]) -> list[tuple[Any, ...]]:
        """Body tuples extended by the record's own values (:data:`meta.META_FIELDS`)."""
        if not body_rows:
            return []
        meta_rows = meta.meta_rows(
            [batch.keys[i] for i in positions],
            [batch.headers[i] for i in positions],
            _picked(batch.partitions, positions),
            _picked(batch.offsets, positions),
            _picked(batch.timestamps_ms, positions),
        )
        return [body + extra for body, extra in zip(body_rows, meta_rows, strict=True)]

    def encode(self, rows: list[tuple[Any, ...]], positions: list[int], keys: list[bytes | None]) -> EncodedRows:
        """Avro datums of typed rows, all in one buffer."""
        if not rows:
            return EncodedRows()
        buf, offsets = self._encoder.encode_tuples(rows, ROW_LAYOUT)
        return EncodedRows(buf, offsets, np.asarray(positions, dtype=np.int64), keys)

    def _bodies(self, batch: RawBatch) -> tuple[list[tuple[Any, ...]], list[int], list[BadRecord]]:
        """Typed body values of the good records, their positions, and the dead letters."""
        limit = self.settings.max_record_bytes
        validator = self._validator
        loads = orjson.loads
        rows: list[tuple[Any, ...]] = []
        positions: list[int] = []
        bad: list[BadRecord] = []
        for i, value in enumerate(batch.values):
            if len(value) > limit:
                bad.append(self.bad_record(batch, i, Reason.TOO_LARGE, TOO_LARGE_TEXT))
                continue
            try:
                obj = loads(value)
            except orjson.JSONDecodeError:
                bad.append(self.bad_record(batch, i, *decode_failure(value)))
                continue
            if type(obj) is not dict:
                bad.append(self.bad_record(batch, i, Reason.NOT_AN_OBJECT, NOT_AN_OBJECT_TEXT))
                continue
            try:
                rows.append(extract(obj, validator))
            except BadBody as exc:
                bad.append(self.bad_record(batch, i, exc.reason, exc.text))
                continue
            positions.append(i)
        return rows, positions, bad


def _picked(column: IntColumn, positions: list[int]) -> list[int]:
    """Python ints of an integer column at ``positions`` (one conversion for numpy columns)."""
    values = column.tolist() if isinstance(column, np.ndarray) else column
    return [int(values[i]) for i in positions]
