"""Broker SIGKILL and restart under load: running workers ride it out, without a process restart.

Two workers (one group, two transactional ids) read a raw topic that a feeder keeps writing to, before,
during and after the outage. The broker is killed and stays down longer than librdkafka's socket and
session timeouts, then comes back on the same port and data. The workers must resume on their own
(no supervisor restarts anything), exit 0 at their idle exit, write a bounded number of log lines
during the outage, and leave typed + DLQ holding each raw record exactly once. A third worker started
during the outage waits for the cluster (one line) and joins once it is back.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka import KafkaException, TopicPartition

from llmpipe.kafka_io import KafkaSettings, Producer, create_topics
from stack import broker
from tests.integration.gpu_stage.conftest import BAD_BODIES, RawSet, chat_body, start_worker, worker_command
from tests.integration.gpu_stage.test_worker import assert_exactly_once

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOWN_S = 20.0
"""How long the broker stays down: longer than the consumers' 10 s session timeout and librdkafka's
connection retries, so every client sees the outage."""

MAX_OUTAGE_LINES = 50
"""The most log lines one worker may write from the kill to the first commit after the broker's return."""

GROUP = "g"


class Feed(threading.Thread):
    """Writes raw records at a steady pace until stopped; every tenth is one the worker must dead-letter.

    Its idempotent producer holds the records written while the broker is down and sends them once
    it is back, each once.
    """

    def __init__(self, kafka: KafkaSettings, topic: str, per_tick: int = 500, tick_s: float = 0.1) -> None:
        super().__init__(name="feed", daemon=True)
        self.kafka, self.topic, self.per_tick, self.tick_s = kafka, topic, per_tick, tick_s
        self.written = RawSet(set(), set())
        self._halt = threading.Event()

    def run(self) -> None:
        producer = Producer(self.kafka, {"linger.ms": 50})
        i = 0
        while not self._halt.is_set():
            for _ in range(self.per_tick):
                key = f"req-{i}".encode()
                bad = i % 10 == 9
                (self.written.bad if bad else self.written.good).add(key)
                value = BAD_BODIES[i % len(BAD_BODIES)] if bad else chat_body(i)
                producer.produce(self.topic, value, key, [("latency.ms", b"12")])
                i += 1
            producer.poll(0)
            time.sleep(self.tick_s)
        producer.flush(120)

    def stop(self) -> RawSet:
        """Stop writing; returns the keys written once they are all delivered."""
        self._halt.set()
        self.join(timeout=150)
        assert not self.is_alive(), "the feed could not deliver its records"
        return self.written


class Committed:
    """Reads the group's committed offsets through a consumer of the group that never joins it.

    The admin client's offset listing (``kafka_io.group_offsets``) can crash the process when the
    coordinator answers NOT_COORDINATOR (librdkafka's admin OffsetFetch has no group handle then),
    which happens around a broker restart; a group member's own lookup does not go that way.
    """

    def __init__(self, kafka: KafkaSettings, topic: str, partitions: int) -> None:
        self._client = confluent_kafka.Consumer({**kafka.client_config(), "group.id": GROUP})
        self._parts = [TopicPartition(topic, p) for p in range(partitions)]

    def total(self) -> int | None:
        """The sum of the committed offsets; None while the broker does not answer."""
        try:
            return sum(max(tp.offset, 0) for tp in self._client.committed(self._parts, timeout=2))
        except KafkaException:
            return None

    def first_commit_after(self, timeout_s: float = 60.0) -> float:
        """Wait for the committed offsets to move on from where they are; the wall-clock time they did."""
        deadline = time.monotonic() + timeout_s
        start = None
        while start is None and time.monotonic() < deadline:
            start = self.total()
        while time.monotonic() < deadline:
            now = self.total()
            if now is not None and start is not None and now > start:
                return time.time()
            time.sleep(0.1)
        pytest.fail(f"no commit within {timeout_s:.0f}s of the broker's return")

    def close(self) -> None:
        self._client.close()


LINE_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def lines_between(log: Path, start: float, end: float) -> list[str]:
    """The log's lines stamped from ``start`` to ``end`` (epoch s; lines without a stamp count too)."""
    out, stamp = [], 0.0
    for line in log.read_text(errors="replace").splitlines():
        found = LINE_TIME.match(line)
        if found:
            stamp = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time, as logged
        if start <= stamp <= end:
            out.append(line)
    return out


@pytest.mark.parametrize("client", ["packed", "objects"])
def test_workers_ride_out_a_broker_sigkill_and_restart(
    own_broker: tuple[Path, int], tmp_path: Path, client: str
) -> None:
    """With either Kafka client (``--kafka-reader`` and ``--kafka-writer`` both ``client``)."""
    root, port = own_broker
    kafka = KafkaSettings(bootstrap=f"127.0.0.1:{port}")
    create_topics(kafka, {"raw": 4})
    feed = Feed(kafka, "raw")
    feed.start()
    logs = [tmp_path / f"w{n}.log" for n in range(3)]
    clients = ["--kafka-reader", client, "--kafka-writer", client]
    procs = [
        start_worker([*worker_command(kafka, "raw", "typed", "dlq", GROUP, f"t{n}", idle_s=6.0), *clients], logs[n])
        for n in range(2)
    ]
    committed = Committed(kafka, "raw", 4)
    deadline = time.monotonic() + 60
    while (committed.total() or 0) < 10_000 and time.monotonic() < deadline:
        time.sleep(0.5)  # both workers under way
    assert all(proc.poll() is None for proc in procs)

    killed_at = time.time()
    broker.stop(root, hard=True)
    time.sleep(DOWN_S / 4)
    late = [*worker_command(kafka, "raw", "typed", "dlq", GROUP, "t2", idle_s=6.0), "--kafka-wait-s", "90", *clients]
    procs.append(start_worker(late, logs[2]))  # starts while the broker is down
    time.sleep(DOWN_S * 3 / 4)
    broker.start(root, port)
    back_at = time.time()
    committed_at = committed.first_commit_after()
    committed.close()
    print(
        f"\nbroker down {back_at - killed_at:.1f}s (killed, then {DOWN_S:.0f}s down and its restart); "
        f"first commit {committed_at - back_at:.1f}s after its return"
    )

    time.sleep(5.0)  # the feed goes on a while after the return
    expected = feed.stop()
    codes = [proc.wait(timeout=120) for proc in procs]  # no process is restarted: each one exits on its own
    texts = [log.read_text(errors="replace") for log in logs]
    for n, (code, text) in enumerate(zip(codes, texts, strict=True)):
        assert code == 0, f"worker {n} exited {code}:\n{text[-4000:]}"
        assert "Traceback" not in text, text[-4000:]
    for n in range(2):
        during = lines_between(logs[n], killed_at, committed_at)
        print(f"worker {n}: {len(during)} log lines from the kill to the first commit after the return")
        assert len(during) < MAX_OUTAGE_LINES, "\n".join(during)
        assert texts[n].count("Kafka unreachable") == 1  # one line per change of state
        assert texts[n].count("Kafka back") == 1
    assert texts[2].count("waiting for Kafka") == 1
    assert_exactly_once(kafka, "typed", "dlq", expected)
    assert len(expected.good) + len(expected.bad) > 40_000
