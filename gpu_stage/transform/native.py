"""The CPU backend: the whole transform in native code (``llmpipe_native``), one call per batch.

The per-record work (strict JSON decoding, the checks of ``gpu_stage/transform/contract/semantics.md``, the content
schema, Avro encoding) runs in the compiled core; Python only hands over the batch's columns and
turns the returned dead-letter positions into :class:`~llmpipe.dlq.BadRecord` objects. The core is
bound to the same Avro schema and content JSON Schema the reference backend uses (the one-schema
rule), and the tests hold its output byte-identical to :mod:`gpu_stage.transform.contract.reference`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from gpu_stage.transform.api import TransformSettings, dead_letter
from gpu_stage.transform.batch import EncodedRows, IntColumn, ParseResult, RawBatch
from gpu_stage.transform.packed import I64, DeadLetters, PackedBatch, Picked
from gpu_stage.transform.pool import HostPool, host_buffer
from llmpipe.dlq import BadRecord, Reason
from llmpipe.errors import ConfigError

if TYPE_CHECKING:
    import llmpipe_native

log = logging.getLogger(__name__)


def native_unusable_reason() -> str | None:
    """Why the native core cannot be loaded here (the package is not built or installed), or None."""
    try:
        import llmpipe_native  # noqa: F401
    except ImportError as exc:
        return f"llmpipe_native is not importable ({exc}); install it with: pip install ./native"
    return None


Packed = tuple[bytes, I64, I64, DeadLetters]
"""What the native core makes of some rows of a packed batch (see :meth:`NativeBackend.run_packed`)."""


def _picks(positions: I64 | None) -> I64 | None:
    return None if positions is None else np.ascontiguousarray(positions, dtype=np.int64)


def _int64_bytes(column: IntColumn) -> bytes:
    return np.ascontiguousarray(column, dtype="<i8").tobytes()


class NativeBackend:
    """Parses batches with the compiled core; see ``gpu_stage/transform/contract/semantics.md`` for the rules."""

    name = "cpu"

    def __init__(self, settings: TransformSettings | None = None, threads: int = 1) -> None:
        """Compile the core for the settings' schemas; a missing core or a bad schema is a ConfigError.

        ``threads`` above 1 lets one call transform runs of at least 512 consecutive records on
        that many threads (the device lane's share of a batch; a worker of its own is one thread).
        """
        self.settings = settings or TransformSettings()
        self.threads = max(1, threads)
        self._inputs = HostPool(host_buffer)
        reason = native_unusable_reason()
        if reason is not None:
            raise ConfigError(reason)
        import llmpipe_native

        record = self.settings.record
        try:
            self._core = llmpipe_native.Transform(
                json.dumps(record.avro), json.dumps(record.content_schema), self.settings.max_record_bytes
            )
        except ValueError as exc:
            msg = f"the native core rejects the record schema: {exc}"
            raise ConfigError(msg) from exc
        log.debug("native cpu backend ready (schema %s)", record.fingerprint)

    def parse(self, batch: RawBatch) -> ParseResult:
        """Parse and encode one batch (pure: same batch, same result)."""
        if len(batch) == 0:
            return ParseResult(EncodedRows(), [])
        encoded, bad = self.run(batch)
        dead = [self._dead_letter(batch, i, reason, text) for i, reason, text in bad]
        return ParseResult(encoded, dead)

    def run(self, batch: RawBatch) -> tuple[EncodedRows, list[tuple[int, str, str]]]:
        """:meth:`parse`'s rows, and its dead letters as found: position, reason code and error text each."""
        if len(batch) == 0:
            return EncodedRows(), []
        buf, ends, positions, bad = self._core.run(
            list(batch.values),
            list(batch.keys),
            list(batch.headers),
            _int64_bytes(batch.partitions),
            _int64_bytes(batch.offsets),
            _int64_bytes(batch.timestamps_ms),
            self.threads,
        )
        rows = np.frombuffer(positions, dtype="<i8").astype(np.int64)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        offsets[1:] = np.frombuffer(ends, dtype="<i8")
        keys = [batch.keys[i] for i in rows.tolist()]
        return EncodedRows(buf, offsets, rows, keys), list(bad)

    def run_packed(self, batch: PackedBatch, positions: I64 | None = None) -> Packed:
        """The records at ``positions`` (increasing; None: all) of a packed batch, read in place.

        Returns ``(buf, ends, rows, bad)``: the encoded rows back to back, each one's end in ``buf``,
        its batch position, and the dead letters (position, reason and text each; their records are
        made when read, so the call makes no Python object per record).
        """
        return self._unpacked(batch, self._core.run_packed(batch.columns(), _picks(positions), self.threads))

    def start_packed(self, batch: PackedBatch, positions: I64 | None = None) -> NativeRun:
        """:meth:`run_packed` started on a native thread; the batch's buffers stay untouched until its result.

        For a caller whose own thread is busy meanwhile (the device lane's feeding thread): a Python
        thread running the call would wait for the GIL to start and again to return, up to the
        interpreter's switch interval each time while that thread runs Python code.
        """
        return NativeRun(self, batch, self._core.start_packed(batch.columns(), _picks(positions), self.threads))

    def _unpacked(self, batch: PackedBatch, raw: tuple[bytes, bytes, bytes, list[tuple[int, str, str]]]) -> Packed:
        buf, ends, rows, bad = raw
        dead = DeadLetters(batch, self.settings.stage, bad)
        return buf, np.frombuffer(ends, dtype=np.int64), np.frombuffer(rows, dtype=np.int64), dead

    def parse_packed(self, batch: PackedBatch) -> ParseResult:
        """:meth:`parse` for a packed batch: the same rows and dead letters, no per-record objects in."""
        if len(batch) == 0:
            return ParseResult(EncodedRows(), [])
        buf, ends, rows, dead = self.run_packed(batch)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        offsets[1:] = ends
        return ParseResult(EncodedRows(buf, offsets, rows, Picked(batch.keys, rows)), dead)

    def input_buffer(self, size: int) -> npt.NDArray[np.uint8]:
        """A host buffer to pack a batch into: any buffer will do here, so a pooled one (no fresh pages)."""
        return self._inputs.take(size + 1)

    def parse_stream(self, batches: Iterable[PackedBatch], overlap: bool = True) -> Iterator[ParseResult]:
        """:meth:`parse_packed` of each batch in turn (one call per batch: there is nothing to overlap)."""
        return map(self.parse_packed, batches)

    def _dead_letter(self, batch: RawBatch, i: int, reason: str, text: str) -> BadRecord:
        return dead_letter(batch, i, self.settings.stage, Reason(reason), text)


class NativeRun:
    """:meth:`NativeBackend.run_packed` on a native thread: :meth:`result` waits for it (without the GIL)."""

    def __init__(self, backend: NativeBackend, batch: PackedBatch, run: llmpipe_native.PackedRun) -> None:
        self._backend, self._batch, self._run = backend, batch, run

    def result(self) -> Packed:
        """What :meth:`NativeBackend.run_packed` returns for the same rows; once only."""
        return self._backend._unpacked(self._batch, self._run.result())

    @property
    def seconds(self) -> float:
        """Seconds the native thread spent on the rows (0 until :meth:`result` returned)."""
        return self._run.seconds or 0.0
