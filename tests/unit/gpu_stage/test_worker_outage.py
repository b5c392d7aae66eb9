"""Riding out a Kafka outage without a broker: blocked calls given up, recovery retried, bounded log lines.

The scripted consumer and fake producer of ``test_worker_commit`` stand in for the Kafka clients; a
fake cluster watch says when "Kafka" answers. Every run still ends with each input key committed once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from gpu_stage.settings import WorkerSettings
from gpu_stage.worker import calls, recovery
from gpu_stage.worker.outage import Outage
from gpu_stage.worker.watchdog import Watchdog
from llmpipe.errors import FencedError
from llmpipe.kafka_io import CallThread, KafkaSettings, TxnTimedOut
from tests.unit.gpu_stage.test_worker_commit import (
    TOPIC,
    FakeProducer,
    IdleConsumer,
    Journal,
    Log,
    ScriptedConsumer,
    ScriptedWorker,
    _assert_each_key_once,
    _records,
)

STATES = ("transaction failed", "Kafka unreachable", "Kafka back, transaction recovered", "Kafka back after")


def _starts(lines: Iterable[str]) -> list[str]:
    """Which state change each line says (``?`` for other lines)."""
    return [next((state for state in STATES if line.startswith(state)), "?") for line in lines]


class FakeWatch:
    """A cluster watch whose state the test sets: ``down()`` and ``up()``."""

    def __init__(self) -> None:
        self.down_since: float | None = None
        self.last_down_at = float("-inf")
        self.up_since = float("-inf")

    def down(self) -> None:
        now = time.monotonic()
        self.down_since, self.last_down_at = now, now

    def up(self) -> None:
        self.last_down_at = time.monotonic()
        self.up_since, self.down_since = time.monotonic(), None

    def answering_for(self, now: float) -> float:
        return 0.0 if self.down_since is not None else max(0.0, now - self.up_since)


class StuckCommit(FakeProducer):
    """A producer whose first commit blocks for good, like ``send_offsets_to_transaction`` on a dead handle."""

    released = threading.Event()

    def commit(self) -> None:
        if self.commits == 0:
            self.commits += 1
            self.journal.note("commit_stuck", 1)
            self.released.wait(30)
            msg = "the abandoned call returned at last"
            raise TxnTimedOut(msg)
        super().commit()


def _worker(watch: FakeWatch, producers: Iterator[Any], journal: Journal, log: Log, n: int = 600,
            **settings: Any) -> tuple[ScriptedWorker, Any]:  # fmt: skip
    records = _records(n)
    consumer = ScriptedConsumer(journal, log, records, 200)
    base = {"kafka": KafkaSettings(), "raw_topic": TOPIC, "batch_records": 200, "batch_wait_ms": 5,
            "parse_chunk_records": 0, "kernel_cache": None,
            "kafka_reader": "objects", "kafka_writer": "objects"}  # fmt: skip  # the fakes stand for confluent-kafka
    worker = ScriptedWorker(WorkerSettings(**{**base, **settings}), consumer, producers)
    worker._watch = watch
    return worker, records


def test_a_commit_blocked_through_an_outage_is_given_up_once_kafka_answers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(calls, "RETURN_GRACE_S", 0.3)
    journal, log, watch = Journal(), Log(), FakeWatch()
    made = iter([StuckCommit(journal, log, {}), *(FakeProducer(journal, log, {}) for _ in range(5))])
    worker, records = _worker(watch, made, journal, log)

    def outage() -> None:  # Kafka goes away while the first commit is in flight, then comes back
        while ("commit_stuck", 1) not in journal.events:
            time.sleep(0.01)
        watch.down()
        time.sleep(0.5)
        watch.up()

    threading.Thread(target=outage, daemon=True).start()
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="gpu_stage.worker"):
        assert worker.run() == 0
    StuckCommit.released.set()
    assert time.monotonic() - started < 10
    _assert_each_key_once(log, records)
    assert worker._calls.abandoned == 1
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert sum("Kafka unreachable" in line for line in lines) == 1
    assert sum("Kafka back, transaction recovered" in line for line in lines) == 1


def test_recovery_is_retried_until_kafka_answers_with_one_line_per_state(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(recovery, "RECOVERY_BACKOFF_S", (0.01, 0.02))
    journal, log, watch = Journal(), Log(), FakeWatch()
    refusals = 8

    def producers() -> Iterator[Any]:
        yield FakeProducer(journal, log, {2: TxnTimedOut})
        for _ in range(refusals):  # Kafka does not answer: the new producer's init_transactions fails
            yield TxnTimedOut("init_transactions failed: Local: Timed out")
        while True:
            yield FakeProducer(journal, log, {})

    made = producers()

    def next_producer() -> Any:
        item = next(made)
        if isinstance(item, Exception):
            raise item
        return item

    worker, records = _worker(watch, iter([next(made)]), journal, log)
    worker._new_producer = next_producer  # type: ignore[method-assign]
    with caplog.at_level(logging.DEBUG, logger="gpu_stage.worker"):
        assert worker.run() == 0
    _assert_each_key_once(log, records)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert _starts(warnings) == ["transaction failed", "Kafka unreachable", "Kafka back, transaction recovered"]
    assert sum("still unreachable" in r.getMessage() for r in caplog.records) == refusals - 1


def test_fencing_during_the_recovery_still_ends_the_run() -> None:
    journal, log, watch = Journal(), Log(), FakeWatch()
    worker, _ = _worker(watch, iter([FakeProducer(journal, log, {1: TxnTimedOut})]), journal, log)

    def fenced() -> Any:
        msg = "init_transactions failed: Broker: Producer fenced"
        raise FencedError(msg)

    worker._new_producer = fenced  # type: ignore[method-assign]
    with pytest.raises(FencedError):
        worker.run()


def test_a_producer_that_lived_through_an_outage_is_replaced_before_its_next_transaction() -> None:
    journal, log, watch = Journal(), Log(), FakeWatch()
    made: list[FakeProducer] = []

    def producers() -> Iterator[FakeProducer]:
        while True:
            made.append(FakeProducer(journal, log, {}))
            yield made[-1]

    worker, records = _worker(watch, producers(), journal, log)
    watch.down()
    watch.up()  # while the worker was idle
    assert worker.run() == 0
    _assert_each_key_once(log, records)
    assert len(made) == 2 and made[1].commits == 3  # replaced once, before the first transaction


class TestWatchdog:
    def _watchdog(self, watch: FakeWatch, deadline_s: float = 0.3) -> tuple[Watchdog, list[float]]:
        fired: list[float] = []
        return Watchdog(deadline_s, watch, fired.append, tick_s=0.02), fired

    def test_fires_when_an_armed_transaction_does_not_complete_while_kafka_answers(self) -> None:
        dog, fired = self._watchdog(FakeWatch())
        dog.arm()
        time.sleep(0.5)
        dog.stop()
        assert fired

    def test_never_fires_while_kafka_does_not_answer_and_counts_from_its_return(self) -> None:
        watch = FakeWatch()
        dog, fired = self._watchdog(watch)
        dog.arm()
        watch.down()
        time.sleep(0.6)
        assert not fired
        watch.up()
        time.sleep(0.15)
        assert not fired and dog.stalled_for(time.monotonic()) < 0.3  # the deadline runs from the return
        time.sleep(0.4)
        dog.stop()
        assert fired

    def test_disarmed_it_stays_quiet(self) -> None:
        dog, fired = self._watchdog(FakeWatch())
        dog.arm()
        dog.disarm()
        time.sleep(0.5)
        dog.stop()
        assert not fired


def test_an_outage_logs_one_line_per_change_of_state(caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage()
    with caplog.at_level(logging.INFO, logger="gpu_stage.worker"):
        outage.failed("timeout", TxnTimedOut("x"))
        for _ in range(100):
            outage.unreachable("no answer")
            outage.failed("timeout", TxnTimedOut("x"))
        outage.recovered()
        outage.recovered()
        outage.failed("abortable", TxnTimedOut("rebalance"))  # a lone failure: one line, no "back"
        outage.recovered()
    assert _starts(r.getMessage() for r in caplog.records) == [
        "transaction failed", "Kafka unreachable", "Kafka back, transaction recovered", "transaction failed",
    ]  # fmt: skip


def test_a_commit_that_ended_before_the_outage_does_not_end_it(caplog: pytest.LogCaptureFixture) -> None:
    outage, down_since = Outage(), time.monotonic()
    with caplog.at_level(logging.INFO, logger="gpu_stage.worker"):
        outage.unreachable("no answer for 9s", down_since)  # seen late: the loop was held up
        outage.recovered(down_since - 0.5)  # the commit in flight had ended before the broker went
        outage.unreachable("no answer for 10s", down_since)
        assert [r.getMessage()[:17] for r in caplog.records] == ["Kafka unreachable"]
        outage.recovered(down_since + 20.0)
    assert _starts(r.getMessage() for r in caplog.records) == ["Kafka unreachable", "Kafka back, transaction recovered"]
    assert caplog.records[-1].getMessage().startswith("Kafka back, transaction recovered after 20.")


class TestCallThread:
    def test_results_and_exceptions_come_through(self) -> None:
        calls = CallThread("t")
        assert calls.submit(lambda: 42).result(timeout=5) == 42
        with pytest.raises(TxnTimedOut):
            calls.submit(lambda: (_ for _ in ()).throw(TxnTimedOut("boom"))).result(timeout=5)
        calls.shutdown()

    def test_an_abandoned_call_leaves_its_thread_and_later_calls_run_on_a_new_one(self) -> None:
        calls, release = CallThread("t"), threading.Event()
        stuck = calls.submit(lambda: release.wait(10))
        time.sleep(0.05)
        calls.abandon()
        assert calls.submit(threading.current_thread).result(timeout=5).name == "t_1"
        assert calls.submit(lambda: threading.current_thread().daemon).result(timeout=5)
        release.set()
        assert stuck.result(timeout=5) is True
        calls.shutdown()


def test_time_in_an_outage_does_not_count_as_idle() -> None:
    """Input may be waiting behind an outage: the idle exit counts only time in which Kafka answers."""
    journal, log, records, watch = Journal(), Log(), _records(30), FakeWatch()
    settings = WorkerSettings(kafka=KafkaSettings(), raw_topic=TOPIC, exit_when_idle_s=0.3, batch_wait_ms=5,
                              parse_chunk_records=0, kernel_cache=None, kafka_reader="objects",
                              kafka_writer="objects")  # fmt: skip
    producers = iter(lambda: FakeProducer(journal, log, {}), None)
    worker = ScriptedWorker(settings, IdleConsumer(journal, log, records), producers)
    worker._watch = watch
    started = time.monotonic()
    watch.down()
    threading.Timer(1.0, watch.up).start()
    assert worker.run() == 0
    # 1.0 s without an answer, then 0.3 s idle after it (counting the outage: about 0.3 s in all)
    assert time.monotonic() - started >= 1.2
    _assert_each_key_once(log, records)
