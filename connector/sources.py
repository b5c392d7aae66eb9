"""Inputs of the connector and how each records its committed progress inside a transaction.

Every input partition's progress (:class:`~connector.progress.Progress`: the position and the
requests done ahead of it) is a record of a small compacted state topic, written in the same
transaction as the outputs and read back at start (or when a partition is assigned), so a restart
neither repeats a committed request nor skips an uncommitted one.

Kafka topic: a consumer group; the position also goes into the transaction as the group's offset
with ``send_offsets_to_transaction`` (KIP-447), which is where reading resumes. JSONL file or stdin:
the position is the number of lines consumed, so file input is exactly once as long as the file's
first lines do not change.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from connector.progress import Progress
from llmpipe import kafka_io
from llmpipe.errors import SourceError

log = logging.getLogger(__name__)
Partition = tuple[str, int]

STATE_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    # One record per partition per transaction: roll and clean often, so that reading the state at
    # start (or at a rebalance) reads minutes of it, not its whole history.
    "segment.ms": "600000",
    "min.cleanable.dirty.ratio": "0.1",
}


@dataclass(frozen=True, slots=True)
class Item:
    """One input record and its position."""

    partition: Partition
    offset: int
    value: bytes | None
    ahead: frozenset[int] = frozenset()
    """Every offset of the partition that an earlier run committed ahead of its position."""

    @property
    def done(self) -> bool:
        """An earlier run already committed this record's output."""
        return self.offset in self.ahead


class Source(Protocol):
    """What the engine needs from an input. Every method runs on the Kafka thread."""

    def poll(self, max_records: int, timeout_s: float) -> list[Item]:
        """Up to ``max_records`` new items (may block up to ``timeout_s``)."""

    def commit_into(self, producer: kafka_io.TransactionalProducer, progress: dict[Partition, Progress]) -> None:
        """Add the partitions' new progress to the open transaction."""

    def exhausted(self) -> bool:
        """True when no item will ever come again (end of file)."""

    def close(self) -> None:
        """Release the input."""


class StateTopic:
    """The compacted topic of committed progress, one record per input partition (its key)."""

    def __init__(self, settings: kafka_io.KafkaSettings, topic: str) -> None:
        self.settings = settings
        self.topic = topic
        kafka_io.create_topics(settings, {topic: 1}, STATE_TOPIC_CONFIG)

    def load(self, keys: Iterable[bytes]) -> dict[bytes, Progress]:
        """The latest committed progress of each of ``keys`` that has any."""
        wanted = set(keys)
        latest = kafka_io.read_latest(self.settings, self.topic)
        return {key: Progress.decode(value) for key, value in latest.items() if key in wanted and value}

    def write(self, producer: kafka_io.TransactionalProducer, key: bytes, progress: Progress) -> None:
        """Add one partition's progress to the open transaction."""
        producer.produce(self.topic, progress.encode(), key)


class KafkaSource:
    """A consumer group member; rebalance callbacks tell the engine which partitions it lost.

    A partition's done set is loaded when its first record after an assignment arrives, and
    forgotten when it is revoked: its next owner loads what this member committed.
    """

    def __init__(
        self,
        settings: kafka_io.KafkaSettings,
        topic: str,
        group_id: str,
        instance_id: str,
        on_revoke: Callable[[list[Partition]], None],
        state_topic: str,
    ) -> None:
        self._group_id = group_id
        self._state = StateTopic(settings, state_topic)
        self._resumed: dict[Partition, frozenset[int]] = {}
        self._held: list[kafka_io.Message] = []
        """Records read whose partitions' state could not be loaded yet (Kafka unreachable)."""
        self._on_revoke = on_revoke
        self._consumer = kafka_io.Consumer(
            settings,
            group_id,
            [topic],
            # Static membership: a restarted instance takes its partitions back at once instead of
            # waiting for the dead member's session to time out.
            config={"max.poll.interval.ms": 300000, "fetch.wait.max.ms": 50, "group.instance.id": instance_id},
            on_revoke=lambda parts: self._revoked([(tp.topic, tp.partition) for tp in parts]),
        )

    def _key(self, part: Partition) -> bytes:
        return f"group:{self._group_id}:{part[0]}:{part[1]}".encode()

    def _revoked(self, parts: list[Partition]) -> None:
        for part in parts:
            self._resumed.pop(part, None)
        lost = set(parts)
        self._held = [m for m in self._held if (m.topic, m.partition) not in lost]
        self._on_revoke(parts)

    def poll(self, max_records: int, timeout_s: float) -> list[Item]:
        """Records of assigned partitions, in offset order per partition, marked done where committed.

        A partition's first records wait here until its committed state is read; while Kafka does
        not answer that read, nothing is returned and the records are held for the next call.
        """
        messages, self._held = self._held or self._consumer.consume(max_records, timeout_s), []
        fresh = {(m.topic, m.partition) for m in messages} - self._resumed.keys()
        if fresh:
            try:
                self._resume(fresh, {(m.topic, m.partition): m.offset for m in reversed(messages)})
            except SourceError as exc:
                log.warning("cannot read the committed state of %s yet, retrying: %s", sorted(fresh), exc)
                self._held = messages
                time.sleep(min(timeout_s, 1.0))
                return []
        resumed = self._resumed
        return [Item((m.topic, m.partition), m.offset, m.value, resumed[(m.topic, m.partition)]) for m in messages]

    def _resume(self, parts: set[Partition], first_offsets: dict[Partition, int]) -> None:
        """Load the done sets of newly assigned partitions (one read of the state topic for all)."""
        loaded = self._state.load(self._key(part) for part in parts)
        for part in parts:
            progress = loaded.get(self._key(part), Progress(0))
            if progress.next > first_offsets[part]:
                # Both are written in one transaction: only an offset reset puts the group behind.
                log.warning(
                    "%s[%d]: the group's offset %d is behind the committed state's %d (offsets reset?); "
                    "the requests between are called again",
                    *part,
                    first_offsets[part],
                    progress.next,
                )
            self._resumed[part] = progress.done
            if progress.done:
                log.info("%s[%d]: %d requests ahead of %d already done", *part, len(progress.done), progress.next)

    def commit_into(self, producer: kafka_io.TransactionalProducer, progress: dict[Partition, Progress]) -> None:
        """Send the group's next offsets with the transaction, and each partition's done set."""
        triples = [(topic, part, p.next) for (topic, part), p in progress.items()]
        producer.send_offsets(kafka_io.offsets(triples), self._consumer.group_metadata())
        for part, p in progress.items():
            self._state.write(producer, self._key(part), p)

    def exhausted(self) -> bool:
        """A topic never ends."""
        return False

    def close(self) -> None:
        """Leave the group."""
        self._consumer.close()


class FileSource:
    """JSONL lines from a file or stdin, skipping the lines a previous run already committed."""

    def __init__(self, settings: kafka_io.KafkaSettings, path: str, state_topic: str, source_id: str) -> None:
        self.path = path
        self.source_id = source_id.encode()
        self._state = StateTopic(settings, state_topic)
        progress = self._state.load([self.source_id]).get(self.source_id, Progress(0))
        self.next_line = progress.next
        self._done = progress.done
        self._stream: BinaryIO = sys.stdin.buffer if path == "-" else self._open(path)
        self._eof = False
        for _ in range(self.next_line):
            if not self._stream.readline():
                self._eof = True
                break
        log.info(
            "file input %s: resuming after %d committed lines, %d lines ahead already done",
            path,
            self.next_line,
            len(self._done),
        )

    @staticmethod
    def _open(path: str) -> BinaryIO:
        try:
            return open(path, "rb")  # closed in close()
        except OSError as exc:
            msg = f"cannot open input file {path}: {exc}"
            raise SourceError(msg) from exc

    @property
    def partition(self) -> Partition:
        """The file's single pseudo-partition."""
        return (f"file:{self.path}", 0)

    def poll(self, max_records: int, timeout_s: float) -> list[Item]:
        """The next non-blank lines (line endings stripped); offsets are 0-based line numbers."""
        del timeout_s
        out: list[Item] = []
        while len(out) < max_records and not self._eof:
            line = self._stream.readline()
            if not line:
                self._eof = True
                break
            value = line.rstrip(b"\r\n")
            if value.strip():  # blank lines are separators, not records
                out.append(Item(self.partition, self.next_line, value, self._done))
            self.next_line += 1
        return out

    def commit_into(self, producer: kafka_io.TransactionalProducer, progress: dict[Partition, Progress]) -> None:
        """Write the line count and the lines done ahead of it into the state topic."""
        mine = progress.get(self.partition)
        if mine is not None:
            self._state.write(producer, self.source_id, mine)

    def exhausted(self) -> bool:
        """True after the last line was read."""
        return self._eof

    def close(self) -> None:
        """Close the file (not stdin)."""
        if self._stream is not sys.stdin.buffer:
            self._stream.close()
