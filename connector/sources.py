"""Inputs of the connector and how each records its committed position inside a transaction.

Kafka topic: a consumer group; positions go into the transaction with ``send_offsets_to_transaction``
(KIP-447). JSONL file or stdin: the position is the number of lines consumed, written as a record of a
small compacted state topic in the same transaction as the outputs, and read back (read_committed) at
start, so file input is exactly once too as long as the file's first lines do not change.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Protocol

import orjson

from llmpipe import kafka_io
from llmpipe.errors import SourceError

log = logging.getLogger(__name__)
Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Item:
    """One input record and its position."""

    partition: Partition
    offset: int
    value: bytes | None


class Source(Protocol):
    """What the engine needs from an input. Every method runs on the Kafka thread."""

    def poll(self, max_records: int, timeout_s: float) -> list[Item]:
        """Up to ``max_records`` new items (may block up to ``timeout_s``)."""

    def commit_into(self, producer: kafka_io.TransactionalProducer, positions: dict[Partition, int]) -> None:
        """Add the next positions to the open transaction."""

    def exhausted(self) -> bool:
        """True when no item will ever come again (end of file)."""

    def close(self) -> None:
        """Release the input."""


class KafkaSource:
    """A consumer group member; rebalance callbacks tell the engine which partitions it lost."""

    def __init__(
        self,
        settings: kafka_io.KafkaSettings,
        topic: str,
        group_id: str,
        instance_id: str,
        on_revoke: Callable[[list[Partition]], None],
    ) -> None:
        self._consumer = kafka_io.Consumer(
            settings,
            group_id,
            [topic],
            # Static membership: a restarted instance takes its partitions back at once instead of
            # waiting for the dead member's session to time out.
            config={"max.poll.interval.ms": 300000, "fetch.wait.max.ms": 50, "group.instance.id": instance_id},
            on_revoke=lambda parts: on_revoke([(tp.topic, tp.partition) for tp in parts]),
        )

    def poll(self, max_records: int, timeout_s: float) -> list[Item]:
        """Records of assigned partitions, in offset order per partition."""
        return [Item((m.topic, m.partition), m.offset, m.value) for m in self._consumer.consume(max_records, timeout_s)]

    def commit_into(self, producer: kafka_io.TransactionalProducer, positions: dict[Partition, int]) -> None:
        """Send the group's next offsets with the transaction."""
        triples = [(topic, part, offset) for (topic, part), offset in positions.items()]
        producer.send_offsets(kafka_io.offsets(triples), self._consumer.group_metadata())

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
        self.state_topic = state_topic
        self.source_id = source_id.encode()
        kafka_io.create_topics(settings, {state_topic: 1}, {"cleanup.policy": "compact"})
        self.next_line = self._committed(settings)
        self._stream: BinaryIO = sys.stdin.buffer if path == "-" else self._open(path)
        self._eof = False
        for _ in range(self.next_line):
            if not self._stream.readline():
                self._eof = True
                break
        log.info("file input %s: resuming after %d committed lines", path, self.next_line)

    @staticmethod
    def _open(path: str) -> BinaryIO:
        try:
            return open(path, "rb")  # closed in close()
        except OSError as exc:
            msg = f"cannot open input file {path}: {exc}"
            raise SourceError(msg) from exc

    def _committed(self, settings: kafka_io.KafkaSettings) -> int:
        position = 0
        # A state topic that never got a record (first run) needs no read: reading it to its end costs
        # about a second of fetch waits, which a watermark lookup does not.
        if not any(kafka_io.end_offsets(settings, self.state_topic).values()):
            return position
        for msg in kafka_io.read_topic(settings, self.state_topic):
            if msg.key == self.source_id and msg.value:
                position = int(orjson.loads(msg.value)["next_line"])
        return position

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
                out.append(Item(self.partition, self.next_line, value))
            self.next_line += 1
        return out

    def commit_into(self, producer: kafka_io.TransactionalProducer, positions: dict[Partition, int]) -> None:
        """Write the line count into the state topic inside the transaction."""
        position = positions.get(self.partition)
        if position is not None:
            producer.produce(self.state_topic, orjson.dumps({"next_line": position}), self.source_id)

    def exhausted(self) -> bool:
        """True after the last line was read."""
        return self._eof

    def close(self) -> None:
        """Close the file (not stdin)."""
        if self._stream is not sys.stdin.buffer:
            self._stream.close()
