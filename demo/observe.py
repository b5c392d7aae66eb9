"""A downstream reader that notes when each record becomes visible to ``read_committed`` consumers.

That moment is what "committed" means to anyone reading the typed topic, so the demo's end-to-end
latency ends there, rather than at the producer's timestamp (set before the transaction commits).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from llmpipe.dlq import HEADER_REASON, HEADER_STAGE
from llmpipe.errors import PipelineError
from llmpipe.kafka_io import Consumer, KafkaSettings, Message

log = logging.getLogger(__name__)


@dataclass
class Seen:
    """What the observer has seen so far (guarded by the observer's lock)."""

    raw: int = 0
    typed: int = 0
    dlq: Counter[tuple[str, str]] = field(default_factory=Counter)
    typed_visible_ms: dict[bytes, int] = field(default_factory=dict)
    raw_visible_ms: dict[bytes, int] = field(default_factory=dict)


def dlq_label(message: Message) -> tuple[str, str]:
    """(stage, reason) of a dead letter."""
    headers = dict(message.headers)
    return (headers.get(HEADER_STAGE, b"?").decode(), headers.get(HEADER_REASON, b"?").decode())


class Observer(threading.Thread):
    """Consume raw, typed and DLQ topics as they fill, stamping the wall time each record shows up."""

    def __init__(self, kafka: KafkaSettings, raw: str, typed: str, dlq: str) -> None:
        super().__init__(name="observer", daemon=True)
        self.topics = (raw, typed, dlq)
        self.consumer = Consumer(kafka, f"demo-observer-{uuid.uuid4().hex[:8]}", list(self.topics),
                                 {"fetch.wait.max.ms": 20, "topic.metadata.refresh.interval.ms": 1000})
        self.seen = Seen()
        self.lock = threading.Lock()
        self.error: PipelineError | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        """Poll until stopped; a failure is kept for the main thread to raise."""
        try:
            while not self._halt.is_set():
                batch = self.consumer.consume(10_000, 0.05)
                now_ms = int(time.time() * 1000)
                with self.lock:
                    for message in batch:
                        self._note(message, now_ms)
        except PipelineError as exc:
            self.error = exc
        finally:
            self.consumer.close()

    def _note(self, message: Message, now_ms: int) -> None:
        raw, typed, _dlq = self.topics
        key = message.key or b""
        if message.topic == typed:
            self.seen.typed += 1
            self.seen.typed_visible_ms.setdefault(key, now_ms)
        elif message.topic == raw:
            self.seen.raw += 1
            self.seen.raw_visible_ms.setdefault(key, now_ms)
        else:
            self.seen.dlq[dlq_label(message)] += 1

    def snapshot(self) -> tuple[int, int, int, int]:
        """(raw, typed, connector dead letters, gpu_stage dead letters) seen so far."""
        with self.lock:
            by_stage = Counter[str]()
            for (stage, _reason), n in self.seen.dlq.items():
                by_stage[stage] += n
            return self.seen.raw, self.seen.typed, by_stage["connector"], by_stage["gpu_stage"]

    def stop(self) -> None:
        """Ask the thread to finish and wait for it."""
        self._halt.set()
        self.join(30)
