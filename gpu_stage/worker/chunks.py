"""Parse and produce a batch chunk by chunk, so that parsing one chunk overlaps enqueueing the last.

Parsing (without the GIL) and enqueueing rows to librdkafka (with it) are the two halves of a batch's
CPU time on the worker's side; running them on two threads makes a batch cost about the longer of the
two instead of their sum.
"""

from __future__ import annotations

import time
from concurrent import futures
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpu_stage import metrics
from gpu_stage.transform.api import StreamBackend
from gpu_stage.transform.batch import ParseResult, RawBatch
from gpu_stage.transform.packed import PackedBatch
from gpu_stage.worker.policy import check_bad
from gpu_stage.worker.state import Outcome, WorkerState
from gpu_stage.worker.wire import typed_values
from llmpipe.kafka_io import PackedKeys, PackedWriter

Batch = RawBatch | PackedBatch
"""A batch or a chunk of one, as objects or packed."""


@dataclass
class Parsing:
    """A batch whose parse has begun: its chunks, and the first chunk's parse on the parse thread."""

    batch: Batch
    chunks: list[Batch]
    first: futures.Future[ParseResult]

    def stop(self) -> None:
        """Cancel the first chunk's parse, or wait for its end: nothing of the batch runs on."""
        self.first.cancel()
        futures.wait([self.first])


class ChunkedParse(WorkerState):
    """The parse and produce step of a transaction: typed rows enqueued, dead letters gathered."""

    def _chunks(self, batch: Batch) -> list[Batch]:
        return [batch.slice(*bounds) for bounds in batch.chunks(self.settings.parse_chunk_records)]

    def _begin_parse(self, batch: Batch, chunks: list[Batch] | None = None) -> Parsing:
        """Start parsing ``batch``'s first chunk on the parse thread (no transaction needed for that)."""
        chunks = chunks or self._chunks(batch)
        return Parsing(batch, chunks, self._parser.submit(self._timed_parse, chunks[0]))

    def _parse_and_produce(self, batch: RawBatch | PackedBatch, parsing: Parsing | None = None) -> Outcome:
        """Parse the batch chunk by chunk on the parse thread, enqueueing each chunk's rows meanwhile.

        The backends do their work without the GIL (the native core, the device lane's packing and
        kernels), so chunk k+1 is parsed while this thread hands chunk k's rows to librdkafka: a
        batch takes about the longer of the two instead of their sum. Rows keep the batch order. A
        batch of one chunk (``--parse-chunk-records 0``) is parsed on this thread, unless its parse
        began already (``parsing``: while the previous batch committed).
        """
        outcome = Outcome()
        if parsing is None:
            chunks = self._chunks(batch)
            if len(chunks) == 1:  # nothing to overlap: parse on this thread
                self._produce_chunk(self._timed_parse(batch), batch, outcome)
                return outcome
            parsing = self._begin_parse(batch, chunks)
        chunks, pending = parsing.chunks, parsing.first
        try:
            for k, chunk in enumerate(chunks):
                result = pending.result()
                if k + 1 < len(chunks):
                    pending = self._parser.submit(self._timed_parse, chunks[k + 1])
                self._produce_chunk(result, chunk, outcome)
        except BaseException:
            pending.cancel()
            futures.wait([pending])  # nothing of this batch runs on into the next one
            raise
        return outcome

    def _produce_chunk(self, result: ParseResult, chunk: RawBatch | PackedBatch, outcome: Outcome) -> None:
        """Enqueue the typed rows of ``chunk`` (parsed into ``result``) and add it to the batch's outcome."""
        if self.settings.on_bad == "fail":
            check_bad(result.bad, 0, self.settings)  # stop at the first bad record, before producing more
        produce_started = time.perf_counter()
        self._produce_typed(result, chunk)
        self._steps["produce"] += time.perf_counter() - produce_started
        outcome.typed += len(result.encoded)
        outcome.bad += result.bad

    def _timed_parse(self, batch: RawBatch | PackedBatch) -> ParseResult:
        stats = getattr(self.backend, "stats", None)  # the gpu backend's running rows per lane
        native_before = stats.slow_rows if stats is not None else 0
        started = time.perf_counter()
        result = self._parse(batch)
        seconds = time.perf_counter() - started
        self._steps["parse"] += seconds
        metrics.PARSE_SECONDS.observe(seconds)
        if stats is None:
            metrics.PARSED_ROWS.labels(self.backend.name).inc(len(batch))
        else:
            native = stats.slow_rows - native_before
            metrics.PARSED_ROWS.labels("native").inc(native)
            metrics.PARSED_ROWS.labels("device").inc(len(batch) - native)
        return result

    def _parse(self, batch: RawBatch | PackedBatch) -> ParseResult:
        """The backend's result for ``batch``; a packed one through the backend's packed path where it has one."""
        if not isinstance(batch, PackedBatch):
            return self.backend.parse(batch)
        if isinstance(self.backend, StreamBackend):
            return next(iter(self.backend.parse_stream([batch], overlap=False)))
        return self.backend.parse(batch.to_raw())

    def _produce_typed(self, result: ParseResult, chunk: RawBatch | PackedBatch) -> None:
        encoded = result.encoded
        partitions: npt.NDArray[np.int64] | None = None
        if self.typed_topic in self._co_partitioned:  # each row to its raw record's partition
            partitions = np.asarray(chunk.partitions, dtype=np.int64)[encoded.rows]
        if isinstance(self.producer, PackedWriter):  # the chunk's rows in one call, from the buffers
            keys: PackedKeys | list[bytes | None] = (
                (chunk.key_buf, chunk.key_ends, chunk.key_null, encoded.rows)
                if isinstance(chunk, PackedBatch) else list(encoded.keys)
            )  # fmt: skip
            self.producer.produce_rows(self.typed_topic, encoded.buf, encoded.offsets, keys, self._typed_headers,
                                       partitions, self._value_prefix or b"")  # fmt: skip
            return
        # Each value is a slice of the one encoded buffer (one copy, which librdkafka then takes over).
        values = typed_values(encoded, self._value_prefix)  # plain datums, or Confluent-framed ones
        where = None if partitions is None else partitions.tolist()
        self.producer.produce_many(self.typed_topic, values, encoded.keys, self._typed_headers, where)
