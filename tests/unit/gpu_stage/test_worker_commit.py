"""The worker's commit overlap: batch k commits on the committer thread while batch k+1 is collected.

No broker: a scripted consumer serves one partition and rewinds to what the fake producer committed,
so the tests count keys the way the integration tests do against a real broker (each input key in
the committed output exactly once), including after a commit that fails while the next batch is read.
"""

from __future__ import annotations

import logging
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from gpu_stage import synth
from gpu_stage.settings import WorkerSettings
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.native import NativeBackend
from gpu_stage.worker import Worker
from gpu_stage.worker import partitions as worker_partitions
from gpu_stage.worker import producer as worker_producer
from llmpipe.errors import ConfigError
from llmpipe.kafka_io import KafkaSettings, Message, Records, TxnAbortable, TxnTimedOut

TOPIC = "raw"
CLIENT_MODULES = {"Consumer": worker_partitions, "PackedReader": worker_partitions,
                  "TransactionalProducer": worker_producer, "PackedWriter": worker_producer}  # fmt: skip
"""Where the worker looks up each Kafka client class it makes: the module to patch it in."""
CLIENT_FLAGS = {"Consumer": ["--kafka-reader", "objects"], "PackedReader": [],
                "TransactionalProducer": ["--kafka-writer", "objects"], "PackedWriter": []}  # fmt: skip
"""The options that make the worker use each client (the packed ones are the defaults)."""
PRODUCERS = ("TransactionalProducer", "PackedWriter")
COMMIT_S = 0.1
"""How long each fake commit takes: long enough that the next batch's collection, and its parse,
begin inside it on a loaded machine (at 30 ms the first parse once started after the first commit
had ended, in a CI run on two busy cores)."""


class Journal:
    """Every call of both fakes, in order, from whichever thread made it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[tuple[str, int]] = []

    def note(self, event: str, n: int = 0) -> None:
        with self._lock:
            self.events.append((event, n))

    def names(self) -> list[str]:
        return [name for name, _ in self.events]


class Log:
    """The partition's committed state: offset and the typed keys of committed transactions."""

    def __init__(self) -> None:
        self.committed_offset = 0
        self.typed_keys: list[bytes] = []


class FakeProducer:
    """A transactional producer: stages keys and offsets, makes them visible on commit."""

    def __init__(self, journal: Journal, log: Log, fail_commits: dict[int, type[Exception]]) -> None:
        self.journal, self.log, self.fail_commits = journal, log, fail_commits
        self.fail_offsets: set[int] = set()
        self.commits = self.offsets_calls = 0
        self._keys: list[bytes] = []
        self._offset: int | None = None

    def begin(self) -> None:
        self.journal.note("begin")
        self._keys, self._offset = [], None

    def produce_many(self, topic: str, values: Any, keys: Any, headers: Any, partitions: Any = None) -> None:
        del topic, values, headers, partitions
        self._keys += keys

    def produce(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Any = None, partition: int = -1
    ) -> None:
        del topic, value, headers, partition
        self._keys.append(key or b"")

    def send_offsets(self, offsets: list[TopicPartition], group_metadata: Any) -> None:
        del group_metadata
        self.offsets_calls += 1
        self.journal.note("offsets", int(threading.current_thread() is threading.main_thread()))
        if self.offsets_calls in self.fail_offsets:
            msg = f"send_offsets {self.offsets_calls} failed"
            raise TxnAbortable(msg)
        (tp,) = offsets
        self._offset = tp.offset

    def commit(self) -> None:
        self.commits += 1
        self.journal.note("commit_start", self.commits)
        time.sleep(COMMIT_S)
        failure = self.fail_commits.pop(self.commits, None)
        if failure is not None:
            self.journal.note("commit_failed", self.commits)
            msg = f"commit {self.commits} failed"
            raise failure(msg)
        assert self._offset is not None
        self.log.typed_keys += self._keys
        self.log.committed_offset = self._offset
        self.journal.note("commit_end", self.commits)

    def abort(self) -> None:
        self.journal.note("abort")
        self._keys, self._offset = [], None


class ScriptedConsumer:
    """One partition of ``records``, served ``per_call`` at a time from a cursor that rewinds."""

    def __init__(self, journal: Journal, log: Log, records: Records, per_call: int, call_s: float = 0.0) -> None:
        self.journal, self.log, self.records, self.per_call, self.call_s = journal, log, records, per_call, call_s
        self.cursor = 0
        self.worker: Worker | None = None
        self.revoke_at_call: int | None = None
        self.calls = 0

    def consume_records(self, max_records: int, timeout_s: float) -> Records:
        del timeout_s
        assert self.worker is not None
        self.calls += 1
        self.journal.note("consume", self.calls)
        time.sleep(self.call_s)
        if self.calls == self.revoke_at_call:
            self.worker._on_revoke([])  # librdkafka runs the callback inside the consume call
            self.journal.note("revoked", self.calls)
        end = min(self.cursor + min(max_records, self.per_call), len(self.records))
        if self.cursor == end:
            self.worker.stopping = True
            return Records()
        out = Records.of_messages(self._message(i) for i in range(self.cursor, end))
        self.cursor = end
        return out

    def _message(self, i: int) -> Message:
        r = self.records
        return Message(TOPIC, 0, r.offsets[i], r.keys[i], r.values[i], r.headers[i], r.timestamps_ms[i])

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, 0)]

    def partition_count(self, topic: str) -> int | None:
        del topic
        return 1

    def positions(self) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, 0, self.cursor)]

    def group_metadata(self) -> object:
        return object()

    def rewind_to_committed(self) -> None:
        self.journal.note("rewind", self.log.committed_offset)
        self.cursor = self.log.committed_offset

    def lag(self, topics: Any = None, *, cached: bool = False) -> dict[tuple[str, int], int]:
        del topics, cached
        return {(TOPIC, 0): len(self.records) - self.cursor}

    def close(self) -> None:
        self.journal.note("close")


class ScriptedWorker(Worker):
    """The worker with the two fakes in place of its Kafka clients."""

    def __init__(self, settings: WorkerSettings, consumer: ScriptedConsumer, producers: Iterator[FakeProducer]) -> None:
        self._consumer, self._producers = consumer, producers
        super().__init__(settings, NativeBackend(TransformSettings()), "typed", "fingerprint")
        consumer.worker = self

    def _new_consumer(self) -> Any:
        return self._consumer

    def _parse(self, batch: Any) -> Any:
        self._consumer.journal.note("parse")
        return super()._parse(batch)

    def _new_producer(self) -> Any:
        return next(self._producers)


def _records(n: int) -> Records:
    batch = synth.batch(synth.bodies(n))
    return Records.of_messages(
        Message(TOPIC, 0, i, batch.keys[i], batch.values[i], list(batch.headers[i]), batch.timestamps_ms[i])
        for i in range(n)
    )


def _run(
    *,
    overlap: bool,
    fail_commits: dict[int, type[Exception]] | None = None,
    fail_offsets: set[int] | None = None,
    revoke_at_call: int | None = None,
    per_call: int = 200,
    call_s: float = 0.0,
    batch_wait_ms: int = 1_000,
) -> tuple[ScriptedWorker, Journal, Log, Records]:
    journal, log, records = Journal(), Log(), _records(1_000)
    consumer = ScriptedConsumer(journal, log, records, per_call, call_s)
    consumer.revoke_at_call = revoke_at_call
    failures = dict(fail_commits or {})
    producers = iter(lambda: _producer(journal, log, failures, fail_offsets or set()), None)
    settings = WorkerSettings(
        kafka=KafkaSettings(), raw_topic=TOPIC, batch_records=200, batch_wait_ms=batch_wait_ms,
        commit_overlap=overlap, parse_chunk_records=0, kernel_cache=None, kafka_reader="objects",
        kafka_writer="objects",
    )  # fmt: skip
    worker = ScriptedWorker(settings, consumer, producers)
    assert worker.run() == 0
    return worker, journal, log, records


def _producer(journal: Journal, log: Log, failures: dict[int, type[Exception]], fail_offsets: set[int]) -> FakeProducer:
    producer = FakeProducer(journal, log, failures)
    producer.fail_offsets = fail_offsets
    return producer


def _spans(journal: Journal, first: str) -> list[tuple[int, int]]:
    """Event indexes of every transaction from its ``first`` event to the end of its commit."""
    starts = [i for i, (name, _) in enumerate(journal.events) if name == first]
    ends = [i for i, (name, _) in enumerate(journal.events) if name in {"commit_end", "commit_failed"}]
    assert len(starts) == len(ends)
    return list(zip(starts, ends, strict=True))


def _assert_each_key_once(log: Log, records: Records) -> None:
    assert sorted(log.typed_keys) == sorted(k or b"" for k in records.keys)
    assert log.committed_offset == len(records)


@pytest.mark.parametrize("overlap", [True, False])
def test_every_key_is_committed_once_and_no_transaction_begins_during_a_commit(overlap: bool) -> None:
    worker, journal, log, records = _run(overlap=overlap)
    _assert_each_key_once(log, records)
    assert worker.totals.batches == 5
    assert worker.totals.records_in == len(records)
    for start, end in _spans(journal, "commit_start"):
        assert "begin" not in journal.names()[start:end]


def test_with_overlap_the_next_batch_is_collected_while_the_previous_commits() -> None:
    _, journal, _, _ = _run(overlap=True)
    # The loop hands the commit over, then collects: the consume call comes before the commit ends.
    collected_during_commit = ["consume" in journal.names()[start:end] for start, end in _spans(journal, "begin")]
    assert collected_during_commit == [True] * 5


def test_without_overlap_nothing_is_collected_during_a_commit() -> None:
    _, journal, _, _ = _run(overlap=False)
    assert not any("consume" in journal.names()[start:end] for start, end in _spans(journal, "begin"))
    assert not any("parse" in journal.names()[start:end] for start, end in _spans(journal, "commit_start"))


def test_with_overlap_the_next_batch_is_parsed_while_the_previous_commits() -> None:
    # Producing needs the batch's own transaction; parsing does not, so it begins before the commit ends.
    _, journal, log, records = _run(overlap=True)
    _assert_each_key_once(log, records)
    parsed_during_commit = ["parse" in journal.names()[start:end] for start, end in _spans(journal, "commit_start")]
    assert parsed_during_commit == [True] * 4 + [False]  # the last commit has no batch after it
    assert journal.names().count("parse") == 5  # one parse per batch: none done twice


def test_with_overlap_a_batch_below_its_limits_stays_open_until_the_commit_ends() -> None:
    # Records trickle in (20 per 2 ms call) and a batch's wait is 1 ms: without overlap each batch
    # closes after one call; with it, a batch gathers what arrives during the previous commit (100 ms).
    off, _, log_off, records = _run(overlap=False, per_call=20, call_s=0.002, batch_wait_ms=1)
    on, journal, log_on, _ = _run(overlap=True, per_call=20, call_s=0.002, batch_wait_ms=1)
    _assert_each_key_once(log_off, records)
    _assert_each_key_once(log_on, records)
    assert off.totals.batches == 50
    assert on.totals.batches <= 10  # the first batch is one call; each later one spans a 100 ms commit
    assert all(end - start > 2 for start, end in _spans(journal, "commit_start")[:-1])  # several calls each


@pytest.mark.parametrize("failure", [TxnAbortable, TxnTimedOut])
def test_a_failed_commit_drops_the_batch_collected_meanwhile_and_both_are_read_again(
    failure: type[Exception],
) -> None:
    worker, journal, log, records = _run(overlap=True, fail_commits={2: failure})
    _assert_each_key_once(log, records)
    assert worker.totals.aborts == 1
    assert worker.totals.batches == 5  # the failed batch and the one collected meanwhile count once, when committed
    failed_at = journal.names().index("commit_failed")
    after = journal.events[failed_at:]
    assert ("rewind", 200) in after  # back to the end of the first batch, the last committed
    if failure is TxnAbortable:
        assert after[1:3] == [("abort", 0), ("rewind", 200)]


def test_offsets_are_added_on_the_committer_thread_right_before_the_commit() -> None:
    """Adding the offsets is two round trips to the coordinators: they overlap the next collection."""
    _, journal, log, records = _run(overlap=True)
    _assert_each_key_once(log, records)
    names = journal.names()
    assert names.count("offsets") == 5
    assert all(names[i + 1] == "commit_start" for i, name in enumerate(names) if name == "offsets")
    assert [on_main for name, on_main in journal.events if name == "offsets"] == [0] * 5


def test_failing_to_add_the_offsets_reads_the_batch_and_the_next_one_again() -> None:
    worker, journal, log, records = _run(overlap=True, fail_offsets={2})
    _assert_each_key_once(log, records)
    assert worker.totals.aborts == 1
    assert worker.totals.batches == 5
    failed_at = journal.names().index("offsets", journal.names().index("offsets") + 1)
    after = journal.events[failed_at:]
    assert ("commit_start", 2) not in after[:2]  # the commit of a transaction without its offsets never runs
    assert ("abort", 0) in after
    assert ("rewind", 200) in after  # back to the end of the first batch, the last committed


def test_a_revocation_waits_for_the_commit_in_flight() -> None:
    _, journal, log, records = _run(overlap=True, revoke_at_call=3)
    _assert_each_key_once(log, records)
    revoked = journal.events.index(("revoked", 3))
    assert ("commit_end", 2) in journal.events[:revoked]


def test_commit_overlap_option(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_stage.settings import parse

    assert parse([])[1].commit_overlap is True
    assert parse(["--commit-overlap", "off"])[1].commit_overlap is False
    monkeypatch.setenv("GPU_STAGE_COMMIT_OVERLAP", "off")
    assert parse([])[1].commit_overlap is False
    with pytest.raises(SystemExit):
        parse(["--commit-overlap", "maybe"])


def test_an_unanswered_lag_query_is_not_idle_and_does_not_stop_the_worker() -> None:
    """The idle check asks the broker for the group's progress; no answer means "not idle yet"."""
    from llmpipe.errors import SourceError

    journal, log, records = Journal(), Log(), _records(10)
    consumer = ScriptedConsumer(journal, log, records, 10, 0.0)
    settings = WorkerSettings(
        kafka=KafkaSettings(), raw_topic=TOPIC, exit_when_idle_s=0.1, parse_chunk_records=0, kernel_cache=None,
        kafka_reader="objects", kafka_writer="objects",
    )
    worker = ScriptedWorker(settings, consumer, iter(lambda: FakeProducer(journal, log, {}), None))
    worker.consumer = consumer  # type: ignore[assignment]
    consumer.cursor = len(records)  # our own partitions are drained: the broker is asked
    answers: list[Any] = [SourceError("Failed to get committed offsets: Local: Timed out"), {(TOPIC, 0): 0}]

    def lag(topics: Any = None, *, cached: bool = False) -> dict[tuple[str, int], int]:
        if cached:
            return {(TOPIC, 0): 0}
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    consumer.lag = lag  # type: ignore[method-assign]
    assert worker._caught_up() is False
    assert worker._caught_up() is True


class IdleConsumer(ScriptedConsumer):
    """Serves its records, then nothing (without stopping the worker); counts the group-lag queries."""

    def __init__(self, journal: Journal, log: Log, records: Records) -> None:
        super().__init__(journal, log, records, 10)
        self.group_queries = 0

    def consume_records(self, max_records: int, timeout_s: float) -> Records:
        if self.cursor == len(self.records):
            time.sleep(0.001)
            return Records()
        return super().consume_records(max_records, timeout_s)

    def lag(self, topics: Any = None, *, cached: bool = False) -> dict[tuple[str, int], int]:
        self.group_queries += topics is not None and not cached
        return super().lag(topics, cached=cached)


def test_the_group_is_asked_whether_it_is_done_only_once_the_idle_time_has_passed() -> None:
    """Asking costs a broker round trip (seconds on a busy coordinator), so not after every empty batch."""
    journal, log, records = Journal(), Log(), _records(30)
    consumer = IdleConsumer(journal, log, records)
    settings = WorkerSettings(
        kafka=KafkaSettings(), raw_topic=TOPIC, exit_when_idle_s=0.2, batch_wait_ms=5, parse_chunk_records=0,
        kernel_cache=None, kafka_reader="objects", kafka_writer="objects",
    )  # fmt: skip
    worker = ScriptedWorker(settings, consumer, iter(lambda: FakeProducer(journal, log, {}), None))
    started = time.monotonic()
    assert worker.run() == 0
    assert time.monotonic() - started >= 0.2
    assert consumer.group_queries == 1  # about 40 empty batches went by: one question, then the exit
    _assert_each_key_once(log, records)


def test_at_debug_each_committed_batch_logs_its_records_and_steps(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="gpu_stage.worker"):
        worker, _, _, records = _run(overlap=True)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("batch ")]
    assert len(lines) == worker.totals.batches == 5
    assert sum(int(line.split(": ")[1].split(" ")[0]) for line in lines) == len(records)
    assert all("collect=" in line and "commit=" in line for line in lines)


@pytest.mark.parametrize(
    ("option", "default", "client", "make", "bad"),
    [
        ("txn_retry_backoff_ms", 20, "TransactionalProducer", "_new_producer", "0"),
        ("txn_retry_backoff_ms", 20, "PackedWriter", "_new_producer", "0"),
        ("fetch_backoff_ms", 10, "Consumer", "_new_consumer", "-1"),
        ("fetch_backoff_ms", 10, "PackedReader", "_new_consumer", "-1"),
    ],
)
def test_a_backoff_option_reaches_its_kafka_client(
    monkeypatch: pytest.MonkeyPatch, option: str, default: int, client: str, make: str, bad: str
) -> None:
    """The option's default, its env var, and the value the worker's client is made with."""
    from gpu_stage.settings import parse

    assert getattr(parse([])[1], option) == default
    monkeypatch.setenv(f"GPU_STAGE_{option.upper()}", "7")
    settings = parse(CLIENT_FLAGS[client])[1]
    assert getattr(settings, option) == 7
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(CLIENT_MODULES[client], client, lambda *args, **kwargs: made.append(kwargs))
    getattr(Worker, make)(types.SimpleNamespace(settings=settings, _on_revoke=None, _on_assign=None))
    kwarg = "retry_backoff_ms" if client in PRODUCERS else option
    assert made[0][kwarg] == 7
    flag = "--" + option.replace("_", "-")
    with pytest.raises(ConfigError, match=flag.removeprefix("--")):
        parse([flag, bad])


@pytest.mark.parametrize(
    ("flag", "client", "make", "refused"),
    [
        ("--consumer-config", "Consumer", "_new_consumer", "isolation.level"),
        ("--consumer-config", "PackedReader", "_new_consumer", "isolation.level"),
        ("--producer-config", "TransactionalProducer", "_new_producer", "transactional.id"),
        ("--producer-config", "PackedWriter", "_new_producer", "transactional.id"),
    ],
)
def test_client_config_reaches_its_kafka_client_over_the_workers_own(
    monkeypatch: pytest.MonkeyPatch, flag: str, client: str, make: str, refused: str
) -> None:
    """Env pairs, then CLI pairs (a later key wins), over the worker's defaults; guarded keys refused."""
    from gpu_stage.settings import parse

    option = flag.removeprefix("--").replace("-", "_")
    assert getattr(parse([])[1], option) == ()
    monkeypatch.setenv(f"GPU_STAGE_{option.upper()}", "socket.timeout.ms=1000 sasl.password=hunter2")
    settings = parse([flag, "socket.timeout.ms=2000", flag, "client.id=w-4096", *CLIENT_FLAGS[client]])[1]
    assert getattr(settings, option) == (
        ("socket.timeout.ms", "1000"), ("sasl.password", "hunter2"),
        ("socket.timeout.ms", "2000"), ("client.id", "w-4096"),
    )  # fmt: skip
    assert "hunter2" not in repr(settings)
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(CLIENT_MODULES[client], client, lambda *args, **kwargs: made.append(kwargs))
    getattr(Worker, make)(types.SimpleNamespace(settings=settings, _on_revoke=None, _on_assign=None))
    config = made[0]["config"]
    assert (config["socket.timeout.ms"], config["client.id"], config["sasl.password"]) == ("2000", "w-4096", "hunter2")
    monkeypatch.delenv(f"GPU_STAGE_{option.upper()}")
    with pytest.raises(ConfigError, match=refused.replace(".", r"\.")):
        parse([flag, f"{refused}=x"])
    with pytest.raises(ConfigError, match="no '='") as malformed:
        parse([flag, "hunter2"])
    assert "hunter2" not in str(malformed.value)


def test_starved_counts_the_consume_calls_that_came_back_short() -> None:
    """Batches of 200 from calls of 50 that each take 10 ms: three short calls a batch, then a full one."""
    worker, _, log, records = _run(overlap=False, per_call=50, call_s=0.01)
    steps, batches = worker.totals.stage_seconds, worker.totals.batches
    assert batches == 5
    assert 3 * 0.01 <= steps["starved"] / batches < steps["collect"] / batches
    _assert_each_key_once(log, records)
    full, _, _, _ = _run(overlap=False, per_call=200, call_s=0.01)
    assert full.totals.stage_seconds["starved"] == 0.0 and full.totals.stage_seconds["collect"] >= 5 * 0.01
