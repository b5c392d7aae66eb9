"""The exactly-once worker: consume a batch, parse it, produce typed + dead letters, commit, repeat.

One Kafka transaction per batch carries the typed records, the DLQ records and the consumed offsets
(``send_offsets_to_transaction``), so after a crash at any point the committed view holds each raw
record exactly once in typed + DLQ.

A transaction's commit (``commit_transaction``: waiting for the records' delivery and the broker's end
of the transaction) runs on a committer thread while the loop collects the next batch; the next
transaction begins only once it is done. Its offsets were added to the transaction before, so the
commit only completes what is already decided. A rebalance (it can only happen while collecting)
waits for a commit in flight, then we forget what we buffered from revoked partitions. When a commit
fails, the batch collected meanwhile is dropped and the consumer rewinds to the committed offsets:
both batches are read again.

A broker outage is ridden out, not exited on. A transaction that fails while Kafka does not answer
is aborted, or its producer replaced, and the consumer rewound, retried with backoff until Kafka
answers again; the loop then goes on where the last commit left it. The transactional calls run on
the committer thread (:class:`~llmpipe.kafka_io.CallThread`) and are waited for in slices, because
librdkafka can block in them past their timeout: after a broker restart ``send_offsets_to_transaction``
can stay blocked on the restarted broker's old handle for good. A call that still blocks a few seconds
after a :class:`~llmpipe.kafka_io.ClusterWatch` saw Kafka answer again (``RETURN_GRACE_S``), or one
that blocks ``CALL_BOUND_S`` while it answers, is given up and its producer replaced: the new
producer's epoch fences the old one's requests, so whatever it still sends is refused. A producer
that lived through an outage is replaced before it begins its next transaction for the same reason.
The log says each change of state once: the first failure, "Kafka unreachable", "Kafka back".

:class:`Worker` is one object made of a mixin per concern, each in its own module:

- :mod:`~gpu_stage.worker.loop`: the loop, its set-up and the idle exit (:class:`Worker`);
- :mod:`~gpu_stage.worker.batches`: gathering a batch (``_collect``), ``to_batch``;
- :mod:`~gpu_stage.worker.partitions`: the consumer, rebalances, co-partitioned outputs;
- :mod:`~gpu_stage.worker.commit`: the transaction step and settling the commit in flight;
- :mod:`~gpu_stage.worker.chunks`: parse and produce, chunk by chunk on the parse thread;
- :mod:`~gpu_stage.worker.wire`: plain Avro values, or Confluent-framed ones (``--schema-registry-url``);
- :mod:`~gpu_stage.worker.policy`: when bad records fail the batch instead of going to the DLQ;
- :mod:`~gpu_stage.worker.calls`: transactional calls given up when they block past their time;
- :mod:`~gpu_stage.worker.producer`: making, resetting and replacing the transactional producer;
- :mod:`~gpu_stage.worker.recovery`: abort or replace, rewind, retried while Kafka does not answer;
- :mod:`~gpu_stage.worker.outage` and :mod:`~gpu_stage.worker.watchdog`: the outage log, the hang exit;
- :mod:`~gpu_stage.worker.report` and :mod:`~gpu_stage.worker.totals`: counts, metrics, progress, summary;
- :mod:`~gpu_stage.worker.state`: the attributes they share.

All of them log through the one logger ``gpu_stage.worker`` (their package's name), so
``--log-level INFO,gpu_stage.worker=DEBUG`` and the log lines read as they did when the worker was
one module.
"""

from gpu_stage.worker.batches import CONSUME_MAX_RECORDS, to_batch
from gpu_stage.worker.loop import Worker
from gpu_stage.worker.producer import MAX_MESSAGE_BYTES
from gpu_stage.worker.totals import STAGES, Totals

__all__ = ["CONSUME_MAX_RECORDS", "MAX_MESSAGE_BYTES", "STAGES", "Totals", "Worker", "to_batch"]
