"""Riding out a cluster outage: telling it from a hang, and giving up on a client call that never returns."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from llmpipe.kafka_io.config import KafkaSettings
from llmpipe.kafka_io.logs import DemotedLog, rdkafka_log

T = TypeVar("T")


class CallThread:
    """Runs blocking client calls one at a time on a daemon thread, so that a caller can stop waiting for one.

    librdkafka's transactional calls can block far past their timeout: ``send_offsets_to_transaction``
    does not check its timeout while the group coordinator is down (confluentinc/librdkafka#5456), and
    after a broker restart it can wait for good on the coordinator's old, decommissioned broker handle
    (#5511): the call returns neither when the broker is back nor when its timeout passes. A caller
    that gives up on such a call (:meth:`abandon`) gets a fresh thread for its next calls and must
    replace the client the call blocks in (a new transactional producer fences the old one). The
    stuck thread is a daemon, so it never keeps the process from exiting; it ends if its call ever
    returns. One call at a time: a call queued behind a stuck one would be stuck with it.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.abandoned = 0
        """How many calls were given up on (each one's thread may still be blocked)."""
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._start()

    def _start(self) -> None:
        self._queue = queue.SimpleQueue()
        thread = threading.Thread(target=self._serve, args=(self._queue,), name=f"{self.name}_{self.abandoned}",
                                  daemon=True)  # fmt: skip
        thread.start()

    @staticmethod
    def _serve(calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None]) -> None:
        while (item := calls.get()) is not None:
            fn, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller through the future
                future.set_exception(exc)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` on the thread; its result or exception comes through the returned future."""
        future: Future[T] = Future()
        self._queue.put((fn, future))
        return future

    def abandon(self) -> None:
        """Leave the thread to the call it is blocked in; later calls run on a new thread."""
        self._queue.put(None)  # the old thread ends once its call returns, if it ever does
        self.abandoned += 1
        self._start()

    def shutdown(self) -> None:
        """Let the thread end after the calls already submitted (without waiting for them)."""
        self._queue.put(None)


class Reachability(Protocol):
    """What a service needs to know of the cluster's state (a :class:`ClusterWatch`)."""

    down_since: float | None
    last_down_at: float

    def answering_for(self, now: float) -> float:
        """Seconds Kafka has been answering since the latest outage (0 while it does not)."""
        ...


class AlwaysAnswering:
    """Stands in where no cluster watch runs (tests, tools): Kafka counts as answering all along."""

    down_since: float | None = None
    last_down_at = float("-inf")

    def answering_for(self, now: float) -> float:
        """Forever."""
        del now
        return float("inf")


class ClusterWatch:
    """Whether the cluster answers, asked every ``every_s`` by a metadata request on a daemon thread.

    A long-running service uses it to tell an outage from a hang: a call that blocks while the
    cluster does not answer is waited for, one that still blocks once it answers again is not. The
    times are ``time.monotonic()`` seconds. A probe asks only for ``topic`` (when given), so it
    stays cheap on a cluster with many topics. Its client retries a lost connection at least once
    a second (librdkafka's backoff grows to 10 s), so a return is seen within about a second, and
    its own log lines go to DEBUG: the service's clients report the same failures.
    """

    def __init__(self, settings: KafkaSettings, topic: str | None = None, every_s: float = 1.0,
                 timeout_s: float = 3.0) -> None:  # fmt: skip
        self._settings = settings
        self._topic = topic
        self.every_s = every_s
        self.timeout_s = timeout_s
        self.down_since: float | None = None
        """When the current outage began (the start of the first probe that got no answer); None while it answers."""
        self.last_down_at = float("-inf")
        """The start of the latest probe that got no answer."""
        self.up_since = float("-inf")
        """The end of the first probe that got an answer after the latest outage."""
        self._stop = threading.Event()
        self._client: AdminClient | None = None

    def start(self) -> ClusterWatch:
        """Start probing; returns self."""
        threading.Thread(target=self._run, name="kafka-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop probing (the probe in progress ends within its timeout)."""
        self._stop.set()

    def answering_for(self, now: float) -> float:
        """Seconds the cluster has been answering since the latest outage (0 while it does not)."""
        return 0.0 if self.down_since is not None else max(0.0, now - self.up_since)

    def probe(self) -> bool:
        """Ask once now; True when the cluster answered within ``timeout_s``."""
        if self._client is None:  # its failures are what it reports: its own lines go to DEBUG
            config: dict[str, Any] = {"reconnect.backoff.max.ms": 1000, **self._settings.client_config(),
                                      "logger": DemotedLog(rdkafka_log)}  # fmt: skip
            self._client = AdminClient(config)
        try:
            self._client.list_topics(self._topic, timeout=self.timeout_s)
        except KafkaException:
            return False
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            asked = time.monotonic()
            if not self.probe():
                self.last_down_at = asked
                if self.down_since is None:
                    self.down_since = asked
            elif self.down_since is not None:
                self.up_since, self.down_since = time.monotonic(), None
