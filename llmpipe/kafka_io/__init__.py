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
"""

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
