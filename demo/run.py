"""One demo run: start everything, feed the prompts through, run a feature job, read back, check, stop.

Progress goes to stderr while the stages run; the result is a :class:`Report` that ``__main__`` prints.
Everything started here is stopped in ``finally`` by the PIDs recorded when it started.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from demo import prompts, stages
from demo.checks import Verdict, check_counts, check_features
from demo.measure import Contents, Topics, read_all, scrape
from demo.observe import Observer, Seen
from demo.procs import Child, Children
from demo.settings import DemoSettings
from llmpipe.errors import ConfigError, SourceError
from llmpipe.kafka_io import KafkaSettings, create_topics, end_offsets, read_topic
from llmpipe.record import TypedRecord
from stack import broker, procs

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 2.0
SETTLE_S = 60.0


@dataclass
class Report:
    """What the summary shows."""

    requests: int = 0
    backend: str = "?"
    backend_why: str = ""
    url: str = ""
    contents: Contents | None = None
    seen: Seen | None = None
    features: list[dict[str, Any]] = field(default_factory=list)
    stage_metrics: dict[str, float] = field(default_factory=dict)
    wall_s: dict[str, float] = field(default_factory=dict)
    verdict: Verdict = field(default_factory=Verdict)


def say(text: str) -> None:
    """Progress for the person watching (stderr, so the summary on stdout stays clean)."""
    sys.stderr.write(f"demo | {text}\n")
    sys.stderr.flush()


class Demo:
    """The run's processes, topics and measurements."""

    def __init__(self, settings: DemoSettings) -> None:
        self.s = settings
        self.children = Children(settings.run_dir / "logs")
        self.broker_root = settings.run_dir / "kafka"
        self.record = TypedRecord.from_file()
        own_broker = settings.bootstrap is None
        self.names = stages.RunNames.make("" if own_broker else f"-demo-{uuid.uuid4().hex[:8]}", self.record)
        self.kafka = KafkaSettings(bootstrap=settings.bootstrap or "")
        self.report = Report()
        self.observer: Observer | None = None

    # ------------------------------------------------------------------------------------- setup

    def _start_broker(self) -> None:
        if self.s.bootstrap is not None:
            say(f"using Kafka at {self.s.bootstrap}; topics suffixed {self.names.suffix}")
            return
        if broker.BrokerDir(self.broker_root).pid() is not None:
            broker.stop(self.broker_root)  # left over from an interrupted demo run (its own PID file)
        shutil.rmtree(self.broker_root, ignore_errors=True)  # fresh topics every run
        started = time.monotonic()
        run = broker.start(self.broker_root)
        self.kafka = KafkaSettings(bootstrap=run.bootstrap())
        say(f"kafka broker up at {run.bootstrap()} (pid {run.pid()}) in {time.monotonic() - started:.1f}s")

    def _prompts(self) -> Path:
        path = self.s.run_dir / "prompts.jsonl"
        spec = prompts.PromptSet(requests=self.s.requests, seed=self.s.seed)
        self.report.requests = prompts.write(spec, path)
        say(f"prompt set: {self.report.requests} requests, {spec.users} users, arms {'/'.join(prompts.ARMS)} "
            f"→ {path}")
        return path

    def _vllm(self) -> str:
        if self.s.vllm_url:
            say(f"using vLLM at {self.s.vllm_url}")
            return self.s.vllm_url
        sim = self.children.start("vllm_sim", stages.simulator(self.s.seed))
        base = sim.wait_for_line(r"READY (http://\S+)", 60).group(1)
        say(f"vLLM simulator up at {base} (pid {sim.pid})")
        return f"{base}/v1/chat/completions"

    def _gpu_stage(self) -> Child:
        port = procs.free_port()
        child = self.children.start("gpu_stage", stages.gpu_stage(self.kafka.bootstrap, self.names, self.s.backend,
                                                                  port))
        found = child.wait_for_line(r"backend: (\w+) \((.*)\)\s*$", 120)
        self.report.backend, self.report.backend_why = found.group(1), found.group(2)
        banner = f" gpu_stage BACKEND: {self.report.backend.upper()}  ({found.group(2)}) "
        say("=" * len(banner))
        say(banner)
        say("=" * len(banner))
        child.wait_for_line(r"consuming ", 60)
        self._stage_metrics_url = f"http://127.0.0.1:{port}/metrics"
        return child

    # ---------------------------------------------------------------------------------- the run

    def run(self) -> Report:
        """Run end to end; always stops what it started."""
        self.s.run_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            self._run()
        finally:
            self._teardown()
        self.report.wall_s["total"] = time.monotonic() - started
        return self.report

    def _run(self) -> None:
        path = self._prompts()
        self._start_broker()
        create_topics(self.kafka, {self.names.raw: 4, self.names.typed: 4, self.names.dlq: 4,
                                   self.names.features: 1})
        await_topics(self.kafka, (self.names.raw, self.names.typed, self.names.dlq))
        self.report.url = self._vllm()
        self.observer = Observer(self.kafka, self.names.raw, self.names.typed, self.names.dlq)
        self.observer.start()
        stage = self._gpu_stage()
        port = procs.free_port()
        conn = self.children.start("connector", stages.connector(self.kafka.bootstrap, self.names, path,
                                                                 self.report.url, port))
        t0 = time.monotonic()
        self._follow(conn, stage, t0)
        self.report.stage_metrics = scrape(self._stage_metrics_url)
        code = self.children.stop(stage)
        self.report.wall_s["connector+gpu_stage"] = time.monotonic() - t0
        if code != 0:
            msg = f"gpu_stage exited {code} on SIGTERM:\n{stage.tail()}"
            raise SourceError(msg)
        self.observer.stop()
        self.report.seen = self.observer.seen
        for child in list(self.children.children):
            if child.name == "vllm_sim":
                self.children.stop(child)
        self._feature_job()
        self._read_back()

    def _follow(self, conn: Child, stage: Child, t0: float) -> None:
        """Print progress until the connector is done and gpu_stage has caught up with raw."""
        assert self.observer is not None
        deadline = t0 + self.s.timeout_s
        settled_at: float | None = None
        while time.monotonic() < deadline:
            time.sleep(PROGRESS_EVERY_S)
            if self.observer.error is not None:
                raise self.observer.error
            raw, typed, conn_dlq, stage_dlq = self.observer.snapshot()
            elapsed = time.monotonic() - t0
            say(f"{elapsed:6.1f}s  requests {self.report.requests} | raw {raw} | connector DLQ {conn_dlq} | "
                f"typed {typed} | gpu_stage DLQ {stage_dlq} | connector {'running' if conn.alive() else 'done'}")
            if not stage.alive():
                msg = f"gpu_stage exited {stage.proc.returncode}:\n{stage.tail()}"
                raise SourceError(msg)
            if conn.alive():
                continue
            if conn.proc.returncode != 0:
                msg = f"connector exited {conn.proc.returncode}:\n{conn.tail()}"
                raise SourceError(msg)
            settled_at = settled_at or time.monotonic()
            if raw + conn_dlq >= self.report.requests and typed + stage_dlq >= raw:
                return
            if time.monotonic() - settled_at > SETTLE_S:
                say("gpu_stage did not catch up with raw; checking what is there")
                return
        msg = f"the run did not finish within {self.s.timeout_s:.0f}s"
        raise ConfigError(msg)

    def _feature_job(self) -> None:
        say("running jobs.model_minute (PyFlink, bounded: reads the typed topic to its end)…")
        started = time.monotonic()
        job = self.children.start("jobs.model_minute", stages.model_minute(self.kafka.bootstrap, self.names))
        while job.alive() and time.monotonic() - started < self.s.timeout_s:
            time.sleep(5)
            if job.alive():
                say(f"  feature job running, {time.monotonic() - started:.0f}s")
        code = self.children.wait(job, 30)
        self.report.wall_s["feature job"] = time.monotonic() - started
        if code != 0:
            msg = f"jobs.model_minute exited {code}:\n{job.tail()}"
            raise SourceError(msg)
        say(f"feature job done in {self.report.wall_s['feature job']:.1f}s")

    def _read_back(self) -> None:
        contents = read_all(self.kafka, stages_topics(self.names), self.record)
        self.report.contents = contents
        self.report.features = [orjson.loads(m.value or b"null") for m in read_topic(self.kafka, self.names.features)]
        check_counts(self.report.verdict, self.report.requests, contents)
        check_features(self.report.verdict, self.report.features, contents.typed)

    def _teardown(self) -> None:
        """Stop processes first (nothing else may keep them alive), then the observer, then the broker."""
        try:
            self.children.stop_all()
            if self.observer is not None and self.observer.is_alive():
                self.observer.stop()
        finally:
            if self.s.bootstrap is None and broker.BrokerDir(self.broker_root).pid() is not None:
                broker.stop(self.broker_root)
                say("kafka broker stopped")

def await_topics(kafka: KafkaSettings, topics: tuple[str, ...], timeout_s: float = 30.0) -> None:
    """Wait until new topics have partition leaders, so subscribers see them from the start."""
    deadline = time.monotonic() + timeout_s
    for topic in topics:
        while True:
            try:
                end_offsets(kafka, topic)
                break
            except Exception as exc:  # librdkafka raises its own types until the leader is elected
                if time.monotonic() > deadline:
                    msg = f"topic {topic} has no leader after {timeout_s:.0f}s"
                    raise SourceError(msg) from exc
                time.sleep(0.2)


def stages_topics(names: stages.RunNames) -> Topics:
    """The measure module's view of the run's topics."""
    return Topics(raw=names.raw, typed=names.typed, dlq=names.dlq, features=names.features)
