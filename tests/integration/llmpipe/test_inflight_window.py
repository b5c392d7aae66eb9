"""The native producer keeps up to five ProduceRequests in flight per partition, and stays exactly once.

librdkafka as released compares the count of *messages* in flight with the broker's window of five
*requests*, so one request of five or more records held back every further request of its partition
until the broker answered; its broker thread spun meanwhile. The build patches that
(``native/patches/rdkafka-sys``). Here the broker is stopped (SIGSTOP: the connection stays up and the
kernel still takes the bytes) while a transaction holds ten requests' worth of records for one partition:
the producer must send exactly the window, five requests, and once the broker runs again the commit must
leave every record once, in order.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from llmpipe.kafka_io import KafkaSettings, PackedWriter, create_topics, read_topic
from stack import broker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW = 5
"""The broker's de-duplication window: the most requests an idempotent producer may have in flight."""

PER_REQUEST = 10
"""Records per ProduceRequest (``batch.num.messages``)."""

STOPPED_S = 3.0
"""The longest the broker stays stopped while the requests go out (they take milliseconds)."""


def _sent_produce_requests(caplog: pytest.LogCaptureFixture) -> int:
    """ProduceRequests librdkafka reported as written to the socket (its ``protocol`` debug lines)."""
    return sum("Sent ProduceRequest" in r.getMessage() for r in caplog.records)


def test_five_requests_go_out_while_the_broker_is_stopped_and_the_commit_keeps_order(
    own_broker: tuple[Path, int], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, port = own_broker
    kafka = KafkaSettings(bootstrap=f"127.0.0.1:{port}")
    topic = f"window-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, {topic: 1})
    writer = PackedWriter(kafka, f"txn-{uuid.uuid4().hex[:8]}", {
        "debug": "protocol", "batch.num.messages": PER_REQUEST, "linger.ms": 0, "request.timeout.ms": 60000,
    })  # fmt: skip
    values = [f"row-{i:04d}".encode() for i in range(1 + 10 * PER_REQUEST)]
    offsets = np.cumsum([0, *map(len, values)], dtype=np.int64)
    keys = [f"k{i}".encode() for i in range(len(values))]
    writer.begin()
    # The first record registers the partition in the transaction; once it is acknowledged nothing else
    # (no coordinator request) stands between the next records and their ProduceRequests.
    writer.produce_rows(topic, values[0], offsets[:2], keys[:1])
    writer.flush(30.0)
    pid = broker.BrokerDir(root).pid()
    assert pid is not None
    # Every line counts here: the package's filter lets one of a run of lines differing in digits through.
    monkeypatch.setattr(logging.getLogger("librdkafka"), "filters", [])
    caplog.set_level(logging.DEBUG, logger="librdkafka")
    caplog.clear()
    os.kill(pid, signal.SIGSTOP)
    try:
        rest = b"".join(values[1:])
        writer.produce_rows(topic, rest, offsets[1:] - offsets[1], keys[1:])
        # A short stop: a KRaft broker paused past its session timeout (9 s) fences itself on return.
        deadline = time.monotonic() + STOPPED_S
        while time.monotonic() < deadline and _sent_produce_requests(caplog) < WINDOW:
            writer.poll(0.1)
        time.sleep(0.5)  # room for a request beyond the window, were one let through
        writer.poll(0.1)
        sent_while_stopped = _sent_produce_requests(caplog)
    finally:
        os.kill(pid, signal.SIGCONT)
    writer.commit()

    assert sent_while_stopped == WINDOW
    seen = sorted(read_topic(kafka, topic, isolation="read_committed"), key=lambda m: m.offset)
    assert [m.value for m in seen] == values
    assert [m.key for m in seen] == keys
