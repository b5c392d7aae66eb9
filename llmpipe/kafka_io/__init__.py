"""The one package that talks to Kafka (confluent-kafka / librdkafka).

Everything else depends on the small types here, imported from the package itself; its modules are
where each part lives:

- :mod:`~llmpipe.kafka_io.config`: connection settings and the librdkafka configuration made from them.
- :mod:`~llmpipe.kafka_io.records`: consumed records, one tuple each or as columns.
- :mod:`~llmpipe.kafka_io.producer`: producers whose every record is confirmed, and transactions.
- :mod:`~llmpipe.kafka_io.consumer`: the consumer-group member of the transactional loop.
- :mod:`~llmpipe.kafka_io.reading`: reading a whole topic to its end, outside any group.
- :mod:`~llmpipe.kafka_io.cluster`: waiting for the cluster, topics, consumer groups, end offsets.
- :mod:`~llmpipe.kafka_io.outages`: riding out an outage (cluster watch, call thread).
- :mod:`~llmpipe.kafka_io.logs`: librdkafka's log lines and the package's own, repeats collapsed.

A test that replaces a name for the code that uses it patches the module that looks it up (for
example ``llmpipe.kafka_io.cluster.admin``), not this package.

Names are loaded on first use (PEP 562): code that needs only :class:`KafkaSettings` (the Flink jobs,
which may run where confluent-kafka is not installed) imports no client library.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmpipe.kafka_io.cluster import (
        admin,
        await_cluster,
        create_topics,
        delete_topics,
        end_offsets,
        group_members,
        group_offsets,
        require_topic,
    )
    from llmpipe.kafka_io.config import COMPRESSIONS, KafkaSettings
    from llmpipe.kafka_io.consumer import FETCH_QUEUE_BACKOFF_MS, Consumer, offsets
    from llmpipe.kafka_io.logs import REPEAT_WINDOW_S, DemotedLog, RepeatFilter
    from llmpipe.kafka_io.outages import AlwaysAnswering, CallThread, ClusterWatch, Reachability
    from llmpipe.kafka_io.packed_reader import PackedColumns, PackedReader, PackedRecords
    from llmpipe.kafka_io.packed_writer import PackedKeys, PackedWriter
    from llmpipe.kafka_io.producer import (
        ANY_PARTITION,
        TXN_RETRY_BACKOFF_MS,
        Producer,
        TransactionalProducer,
        TxnAbortable,
        TxnTimedOut,
    )
    from llmpipe.kafka_io.reading import read_latest, read_topic
    from llmpipe.kafka_io.records import Headers, Message, Records, TopicPartitions

_HOMES = {
    "admin": "cluster",
    "await_cluster": "cluster",
    "create_topics": "cluster",
    "delete_topics": "cluster",
    "end_offsets": "cluster",
    "group_members": "cluster",
    "group_offsets": "cluster",
    "require_topic": "cluster",
    "COMPRESSIONS": "config",
    "KafkaSettings": "config",
    "Consumer": "consumer",
    "FETCH_QUEUE_BACKOFF_MS": "consumer",
    "offsets": "consumer",
    "DemotedLog": "logs",
    "REPEAT_WINDOW_S": "logs",
    "RepeatFilter": "logs",
    "AlwaysAnswering": "outages",
    "CallThread": "outages",
    "ClusterWatch": "outages",
    "Reachability": "outages",
    "PackedColumns": "packed_reader",
    "PackedReader": "packed_reader",
    "PackedRecords": "packed_reader",
    "PackedKeys": "packed_writer",
    "PackedWriter": "packed_writer",
    "ANY_PARTITION": "producer",
    "Producer": "producer",
    "TXN_RETRY_BACKOFF_MS": "producer",
    "TransactionalProducer": "producer",
    "TxnAbortable": "producer",
    "TxnTimedOut": "producer",
    "read_latest": "reading",
    "read_topic": "reading",
    "Headers": "records",
    "Message": "records",
    "Records": "records",
    "TopicPartitions": "records",
}
"""Where each public name lives: its module is imported when the name is first asked for."""


def __getattr__(name: str) -> Any:
    """Import the module that holds ``name`` and return it (``AttributeError`` for unknown names)."""
    home = _HOMES.get(name)
    if home is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(_HOMES)


__all__ = [
    "ANY_PARTITION",
    "COMPRESSIONS",
    "FETCH_QUEUE_BACKOFF_MS",
    "REPEAT_WINDOW_S",
    "TXN_RETRY_BACKOFF_MS",
    "AlwaysAnswering",
    "CallThread",
    "ClusterWatch",
    "Consumer",
    "DemotedLog",
    "Headers",
    "KafkaSettings",
    "Message",
    "PackedColumns",
    "PackedKeys",
    "PackedReader",
    "PackedRecords",
    "PackedWriter",
    "Producer",
    "Reachability",
    "Records",
    "RepeatFilter",
    "TopicPartitions",
    "TransactionalProducer",
    "TxnAbortable",
    "TxnTimedOut",
    "admin",
    "await_cluster",
    "create_topics",
    "delete_topics",
    "end_offsets",
    "group_members",
    "group_offsets",
    "offsets",
    "read_latest",
    "read_topic",
    "require_topic",
]
