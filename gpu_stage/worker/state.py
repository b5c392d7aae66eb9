"""What the parts of the worker share: its clients, its threads, the batch in flight and the counts.

:class:`~gpu_stage.worker.loop.Worker` is put together from mixins, one per module (collecting,
partitions, the transaction step, guarded calls, recovery, reporting); each reads and writes the
state declared here, which ``Worker.__init__`` sets up.
"""

from __future__ import annotations

import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import NamedTuple

from gpu_stage.settings import WorkerSettings
from gpu_stage.transform.api import Backend
from gpu_stage.worker.outage import Outage
from gpu_stage.worker.totals import Totals
from gpu_stage.worker.watchdog import Watchdog
from llmpipe.dlq import BadRecord
from llmpipe.kafka_io import (
    CallThread,
    Consumer,
    Headers,
    PackedReader,
    PackedRecords,
    PackedWriter,
    Reachability,
    Records,
    TransactionalProducer,
)

Consumed = Records | PackedRecords
"""A batch's consumed records: as objects, or as packed columns (``--kafka-reader packed``)."""
TxnProducer = TransactionalProducer | PackedWriter
"""The worker's transactional producer: through confluent-kafka, or the native core (``--kafka-writer packed``)."""


class CommitEnd(NamedTuple):
    """When a commit ended, by three clocks."""

    at: float
    """Wall-clock time (epoch s)."""
    cpu: float
    """The process's CPU time (s)."""
    monotonic: float
    """Monotonic s: compared with when Kafka stopped answering (:meth:`Outage.recovered`)."""


@dataclass
class Outcome:
    """What a batch's transaction carried: the number of typed rows and the dead letters."""

    typed: int = 0
    bad: list[BadRecord] = field(default_factory=list)


@dataclass
class InFlight:
    """A batch whose transaction is committing on the committer thread."""

    records: Consumed
    outcome: Outcome
    started: float
    """Wall-clock time (epoch s) its processing began."""
    steps: dict[str, float]
    """Its seconds per step (``STAGES``); the committer thread adds the commit's."""
    committed: futures.Future[CommitEnd]
    """Resolves to when the commit ended."""
    handed_at: float = field(default_factory=time.monotonic)
    """When the commit was handed to the committer thread (monotonic s)."""


class WorkerState:
    """The attributes every part of the worker may use (set in ``Worker.__init__``, described there)."""

    settings: WorkerSettings
    backend: Backend
    typed_topic: str
    _typed_headers: Headers
    _value_prefix: bytes | None = None
    """Bytes before each typed datum: the Confluent wire prefix with ``--schema-registry-url``, else none."""
    totals: Totals
    stopping: bool
    consumer: Consumer | PackedReader
    producer: TxnProducer
    _producer_made_at: float
    _buffer: Consumed
    _steps: dict[str, float]
    _collect_s: float
    _starved_s: float
    _parser: futures.ThreadPoolExecutor
    _calls: CallThread
    _in_flight: InFlight | None
    _watch: Reachability
    _call_bound_s: float
    _outage: Outage
    _watchdog: Watchdog
    _idle_check_failing: bool
    _co_partitioned: frozenset[str]
    _partitioning_stale: bool

    def _new_buffer(self) -> Consumed:
        """An empty collect buffer of the kind the consumer fills."""
        if self.settings.kafka_reader == "packed":
            return PackedRecords(self.settings.raw_topic)
        return Records()
