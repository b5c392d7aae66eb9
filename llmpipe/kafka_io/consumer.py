"""The consumer-group member of the transactional loop, and the offsets it hands to a transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from llmpipe.errors import SourceError
from llmpipe.kafka_io.config import KafkaSettings
from llmpipe.kafka_io.logs import log
from llmpipe.kafka_io.records import Message, Records, _KafkaMessage, _to_message

FETCH_QUEUE_BACKOFF_MS = 10
"""Once a consumer's prefetch queue holds ``queued.max.messages.kbytes`` (64 MiB) or
``queued.min.messages`` per partition, librdkafka stops fetching and postpones the next fetch by
``fetch.queue.backoff.ms``, 1000 ms by default. A loop that takes a batch and then works on it
drains that queue in a fraction of a second and then waits in ``consume`` for the rest of the second:
one consumer of two partitions of 1 KB records read 87 k records/s at the default and 263 to 319 k/s
at 10 ms (``python -m bench.fetch_backoff``, bench/results/fetch-backoff-vm.json)."""


def member_config(
    settings: KafkaSettings, group_id: str, fetch_backoff_ms: int, config: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Librdkafka settings of a group member of the transactional loop, ``config`` over them.

    No auto commit (offsets commit inside the producer's transaction), ``read_committed``, reading
    from the start of a partition the group has no offset for, cooperative rebalancing.
    """
    base = {
        "fetch.queue.backoff.ms": fetch_backoff_ms,
        "group.id": group_id,
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "cooperative-sticky",
    }
    return {**settings.client_config(), **base, **dict(config or {})}


class Consumer:
    """A consumer group member for the transactional loop: no auto commit, read_committed."""

    def __init__(
        self,
        settings: KafkaSettings,
        group_id: str,
        topics: Sequence[str],
        config: Mapping[str, Any] | None = None,
        on_revoke: Callable[[list[TopicPartition]], None] | None = None,
        on_assign: Callable[[list[TopicPartition]], None] | None = None,
        fetch_backoff_ms: int = FETCH_QUEUE_BACKOFF_MS,
    ) -> None:
        """Subscribe to ``topics``.

        ``fetch_backoff_ms`` is the pause after a full prefetch queue (see :data:`FETCH_QUEUE_BACKOFF_MS`).
        """
        self._client = confluent_kafka.Consumer(member_config(settings, group_id, fetch_backoff_ms, config))
        kwargs: dict[str, Any] = {}
        if on_revoke is not None:
            kwargs["on_revoke"] = lambda _c, parts: on_revoke(parts)
            kwargs["on_lost"] = lambda _c, parts: on_revoke(parts)
        if on_assign is not None:
            kwargs["on_assign"] = lambda _c, parts: on_assign(parts)
        self._client.subscribe(list(topics), **kwargs)
        # The one topic every record comes from, when there is one (a name, not a pattern).
        self._topic = topics[0] if len(topics) == 1 and not topics[0].startswith("^") else None

    def consume(self, max_records: int, timeout_s: float) -> list[Message]:
        """Up to ``max_records`` records; raises ``SourceError`` on a non-EOF error."""
        out = []
        for msg in self._client.consume(max_records, timeout_s):
            error = msg.error()
            if error is None:
                out.append(_to_message(msg))
            elif error.code() != KafkaError._PARTITION_EOF:
                if error.fatal() or error.code() == KafkaError._FATAL:
                    raise SourceError(str(error))
                log.warning("consume: %s", error)
        return out

    def consume_records(self, max_records: int, timeout_s: float) -> Records:
        """Like :meth:`consume`, as columns (see :class:`Records`): the batch path's cheaper form."""
        got = self._client.consume(max_records, timeout_s)
        if list(map(_KafkaMessage.error, got)).count(None) != len(got):
            got = [msg for msg in got if self._usable(msg)]
        return Records.of(got, self._topic)

    @staticmethod
    def _usable(msg: Any) -> bool:
        """True for a record; False for a partition EOF or a passing error; raise on a fatal one."""
        error = msg.error()
        if error is None:
            return True
        if error.code() != KafkaError._PARTITION_EOF:
            if error.fatal() or error.code() == KafkaError._FATAL:
                raise SourceError(str(error))
            log.warning("consume: %s", error)
        return False

    def partition_count(self, topic: str, timeout_s: float = 10.0) -> int | None:
        """How many partitions ``topic`` has, from the cluster's metadata; None where it does not exist."""
        try:
            found = self._client.list_topics(topic, timeout=timeout_s).topics.get(topic)
        except KafkaException as exc:
            msg = f"cannot read the metadata of {topic}: {exc}"
            raise SourceError(msg) from exc
        if found is None or found.error is not None:
            return None
        return len(found.partitions)

    def positions(self) -> list[TopicPartition]:
        """Next offsets to read on every assigned partition."""
        return list(self._client.position(self._client.assignment()))

    def group_metadata(self) -> Any:
        """Group metadata for ``send_offsets_to_transaction``."""
        return self._client.consumer_group_metadata()

    def rewind_to_committed(self, timeout_s: float = 30.0) -> None:
        """Seek every assigned partition back to its committed offset (after an abort).

        A cluster that does not answer within ``timeout_s`` is a ``SourceError``; nothing is moved
        then, so the call can simply be made again.
        """
        assigned = self._client.assignment()
        if not assigned:
            return
        try:
            for tp in self._client.committed(assigned, timeout=timeout_s):
                offset = tp.offset if tp.offset >= 0 else confluent_kafka.OFFSET_BEGINNING
                self._client.seek(TopicPartition(tp.topic, tp.partition, offset))
        except KafkaException as exc:
            msg = f"cannot rewind {len(assigned)} partitions to their committed offsets: {exc.args[0].str()}"
            raise SourceError(msg) from exc

    def assignment(self) -> list[TopicPartition]:
        """Currently assigned partitions."""
        return list(self._client.assignment())

    def lag(self, topics: Sequence[str] | None = None, *, cached: bool = False) -> dict[tuple[str, int], int]:
        """Records left to read per partition (high watermark - position).

        Without ``topics``: the partitions assigned to this member. With ``topics``: every partition
        of them, so a member can tell that the whole group is done (partitions it does not own count
        from the group's committed offset). Where a position is unknown (nothing consumed yet, or not
        ours), the committed offset, else the low watermark, stands in for it. ``cached`` uses the
        watermarks the last fetches brought instead of asking the broker (a round trip per partition;
        good enough for a metric, not for deciding that the input is finished). A broker that does
        not answer in time is a :class:`SourceError`.
        """
        try:
            return self._lag(topics, cached)
        except KafkaException as exc:
            msg = f"cannot read the lag of {list(topics) if topics else 'the assigned partitions'}: {exc}"
            raise SourceError(msg) from exc

    def _lag(self, topics: Sequence[str] | None, cached: bool) -> dict[tuple[str, int], int]:
        assigned = self._client.assignment()
        if topics is not None:
            owned = {(tp.topic, tp.partition) for tp in assigned}
            everything = [TopicPartition(t, p) for t in topics for p in self._client.list_topics(t, timeout=10)
                          .topics[t].partitions]
            assigned = assigned + [tp for tp in everything if (tp.topic, tp.partition) not in owned]
        if not assigned:
            return {}
        positions = self._client.position(assigned)
        unknown = [tp for tp in positions if tp.offset < 0]
        committed = {(tp.topic, tp.partition): tp.offset for tp in self._client.committed(unknown, timeout=10)} \
            if unknown else {}
        out = {}
        for tp in positions:
            low, high = self._client.get_watermark_offsets(tp, timeout=5, cached=cached)
            if high < 0:  # nothing cached for this partition yet
                continue
            where = tp.offset if tp.offset >= 0 else committed.get((tp.topic, tp.partition), -1)
            out[(tp.topic, tp.partition)] = max(0, high - (where if where >= 0 else low))
        return out

    def close(self) -> None:
        """Leave the group."""
        self._client.close()


def offsets(items: Iterable[tuple[str, int, int]]) -> list[TopicPartition]:
    """``TopicPartition`` list from (topic, partition, next offset) triples."""
    return [TopicPartition(t, p, o) for t, p, o in items]
