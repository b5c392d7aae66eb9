r"""The cuDF reader path of the GPU backend (``--backend gpu-cudf``): cuDF's JSON reader plus a host slow lane.

The GPU backend (:mod:`gpu_stage.transform.gpu`) runs the device lane by default; this path runs
when asked for, or when the lane cannot start. What runs where, per batch:

1. Pre-screen: which bodies the device reader may see. One device thread per body
   (:mod:`gpu_stage.transform.cudf.screen`): size limit, ``{`` first and ``}`` last, no raw control
   bytes (a raw newline would split the JSON-lines buffer), strict UTF-8, no ``\\u`` escapes, no
   ``NaN``/``Infinity``, brackets that nest, no explicit null message/delta, no key repeated within
   one object (orjson keeps the last of duplicate keys, the device reader the first); other syntax
   errors are left to the reader's strict validation. Where numba-cuda cannot compile the kernel,
   :func:`gpu_stage.transform.cudf.rows.device_safe` decides per body on the host (orjson-strict).
   The safe bodies are joined into one newline-delimited buffer, copied in once (pinned).
2. Device (cuDF): two reads of that buffer with the declared schema (:mod:`gpu_stage.transform.cudf.read`):
   token texts for the type rules of ``gpu_stage/transform/contract/semantics.md`` and decoded
   values; the fast-lane mask (types, integer ranges, supported ``object``, integer ``created``, at
   most one choice, no unknown or ``metadata``/``error`` keys), first-choice selection, integer
   conversion, ``created`` to ms.
3. Host: the fast rows' columns are copied back; rows are built column by column, and content
   and tool arguments get their second-stage parse (:mod:`gpu_stage.transform.contract.content`, per value, CPU).
   Every other row, including every row that ends as a dead letter, takes the slow lane: the CPU
   reference per record (:func:`gpu_stage.transform.cudf.rows.reference_row`).
4. Host: all good rows, in batch order, are encoded by the same :class:`BulkEncoder` as the CPU backend.

So the output is byte-identical to the CPU backend by construction for slow rows, and by the
parity tests (shared vectors, real corpus, 100,000 generated bodies) for fast rows. If the device
read cannot give a row-aligned result in the declared shape (a mistyped nested value turns a struct
column into strings, a reader error), the whole batch takes the slow lane and a warning is logged.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.batch import ParseResult, RawBatch
from gpu_stage.transform.contract.content import ContentValidator, parse_content, parse_tool_arguments
from gpu_stage.transform.contract.extract import BODY_FIELDS
from gpu_stage.transform.contract.reference import ReferenceBackend
from gpu_stage.transform.cudf import read as gpu_read
from gpu_stage.transform.cudf import source
from gpu_stage.transform.cudf.device import load
from gpu_stage.transform.cudf.rows import device_safe, reference_row
from gpu_stage.transform.stages import StageClock
from llmpipe.dlq import BadRecord, Reason

log = logging.getLogger(__name__)


def _compile_screen(limit: int) -> Any:
    """The device pre-screen, checked on two bodies; None (host pre-screen) where it does not work."""
    try:
        screen = importlib.import_module("gpu_stage.transform.cudf.screen").DeviceScreen()
        probe = [b'{"id":"a"}', b'{"id":"a","id":"b"}']
        offsets = np.array([0, len(probe[0]), len(probe[0]) + len(probe[1])], dtype=np.int64)
        got = screen.run(np.frombuffer(b"".join(probe), dtype=np.uint8), offsets, limit).tolist()
    except Exception as exc:  # numba-cuda missing or failing to compile: the host screen is exact too
        log.warning("device pre-screen unavailable, screening on the host: %s", exc)
        return None
    if got != [1, 0]:
        log.warning("device pre-screen answered %s on its probe, screening on the host", got)
        return None
    log.info("device pre-screen ready")
    return screen


class CudfPath:
    """One batch through cuDF's reader (fast rows) and the reference per record (every other row)."""

    def __init__(self, settings: TransformSettings, clock: StageClock, *, pinned: bool, device_screen: bool) -> None:
        """Import cuDF, and build the pinned input stage and the device pre-screen where asked for.

        ``pinned`` copies each batch to the device once through a pinned buffer
        (:mod:`gpu_stage.transform.cudf.source`); off, cuDF reads the host bytes itself (two pageable
        copies per batch). ``device_screen`` runs the pre-screen as a device kernel
        (:mod:`gpu_stage.transform.cudf.screen`); where it cannot compile, the host one runs.
        """
        self.settings = settings
        self.clock = clock
        self._cudf = load()
        self._cpu = ReferenceBackend(settings)
        self._validator = ContentValidator.of(settings.record.content_schema)
        self.pinned_stage: Any = source.PinnedStage() if pinned else None
        self.device_screen: Any = _compile_screen(settings.max_record_bytes) if device_screen else None

    def parse(self, batch: RawBatch) -> tuple[ParseResult, int, bool]:
        """The batch's result, how many rows took the slow lane, and whether the device read failed."""
        limit = self.settings.max_record_bytes
        clock = self.clock
        with clock.stage("screen"):
            safe = self._screen(batch.values, limit)
        rows: dict[int, tuple[Any, ...]] = self._device_rows(batch, safe) if safe else {}
        good: list[tuple[Any, ...]] = []
        positions: list[int] = []
        bad: list[BadRecord] = []
        with clock.stage("slow_lane"):
            for i, value in enumerate(batch.values):
                row = rows.get(i)
                if row is None:
                    row = reference_row(value, self._validator, limit)
                    if isinstance(row[0], Reason):
                        bad.append(self._cpu.bad_record(batch, i, row[0], row[1]))
                        continue
                good.append(row)
                positions.append(i)
        with clock.stage("encode"):
            encoded = self._cpu.encode_bodies(batch, good, positions)
        return ParseResult(encoded, bad), len(batch) - len(rows), bool(safe) and not rows

    def _screen(self, values: Sequence[bytes], limit: int) -> list[int]:
        """Positions of the bodies the device reader may see (one kernel launch, or per body on the host)."""
        if self.device_screen is None or not values:
            return [i for i, value in enumerate(values) if device_safe(value, limit)]
        offsets = np.zeros(len(values) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=len(values)), out=offsets[1:])
        mask = self.device_screen.run(np.frombuffer(b"".join(values), dtype=np.uint8), offsets, limit)
        safe: list[int] = np.flatnonzero(mask).tolist()
        return safe

    def _device_rows(self, batch: RawBatch, safe: list[int]) -> dict[int, tuple[Any, ...]]:
        """Typed values of the fast-lane rows among ``safe`` positions, keyed by batch position."""
        with self.clock.stage("join"):
            buf = b"\n".join([batch.values[i] for i in safe])
        try:
            fast = gpu_read.read_fast(self._cudf, buf, len(safe), self.clock, self.pinned_stage)
        except gpu_read.DeviceReadError as exc:
            log.warning("gpu batch of %d rows takes the slow lane: %s", len(batch), exc)
            return {}
        positions = [i for i, ok in zip(safe, fast.lane, strict=True) if ok]
        with self.clock.stage("assemble"):
            rows = self._assemble(fast.columns)
        return dict(zip(positions, rows, strict=True))

    def _assemble(self, cols: dict[str, list[Any]]) -> list[tuple[Any, ...]]:
        """Fast-lane columns → rows of :data:`BODY_FIELDS`, built column by column.

        The second-stage parses (content against the schema, tool arguments) run per value on the
        host with the CPU backend's own functions, so their results are the reference's.
        """
        validator = self._validator
        texts = cols["content_text"]
        n = len(texts)
        none3: tuple[None, None, None] = (None, None, None)
        parsed = [none3 if text is None else parse_content(text, validator) for text in texts]
        tools = [parse_tool_arguments(a) for a in cols["tool_arguments"]]
        choices = [
            [{"index": index, "finish_reason": finish, "content": text}] if count else []
            for count, index, finish, text in zip(
                cols["num_choices"], cols["index"], cols["finish_reason"], texts, strict=True
            )
        ]
        derived: dict[str, list[Any]] = {
            "tool_arguments": [t[0] for t in tools],
            "tool_arguments_valid": [t[1] for t in tools],
            "choices": choices,
            "metadata": [None] * n,
            "extra": [{} for _ in range(n)],
            "content_valid": [p[0] for p in parsed],
            "content_error": [p[1] for p in parsed],
            "content": [p[2] for p in parsed],
        }
        columns = [derived[name] if name in derived else cols[name] for name in BODY_FIELDS]
        return list(zip(*columns, strict=True)) if n else []
