"""The connector rides out a broker outage: SIGKILL the broker mid-run, restart it, and the same
connector process finishes the input exactly once with a bounded number of log lines."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from llmpipe import kafka_io
from llmpipe.kafka_io import KafkaSettings, create_topics
from stack import broker

from .harness import Topics, connector_cmd, produce_requests, simulator, start, wait_for, write_requests

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _written(kafka: KafkaSettings, topics: Topics) -> int:
    return sum(sum(kafka_io.end_offsets(kafka, t).values()) for t in (topics.raw, topics.dlq))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("source", ["file", "topic"])
def test_broker_killed_and_restarted_mid_run(own_broker: tuple[Path, int], tmp_path: Path, source: str) -> None:
    root, port = own_broker
    kafka = KafkaSettings(bootstrap=f"127.0.0.1:{port}")
    topics = Topics("requests", "raw", "dlq")
    create_topics(kafka, {"requests": 4, "raw": 4, "dlq": 4})
    total = 3000
    ids = [f"o-{i:05d}" for i in range(total)]
    if source == "topic":
        produce_requests(kafka, topics.requests, ids)
        where = ["--input-topic", topics.requests, "--group-id", "outage"]
    else:
        path = tmp_path / "requests.jsonl"
        write_requests(path, ids)
        where = ["--input-file", str(path)]
    log = tmp_path / "connector.log"
    with simulator("--seed", "9", "--ttft-ms", "100") as url:
        cmd = connector_cmd(kafka, url, topics, "outage-0", *where, "--state-topic", "state",
                            "--max-in-flight", "32", "--log-level", "INFO")  # fmt: skip
        proc = start(cmd, log)
        deadline = time.monotonic() + 60
        while _written(kafka, topics) < total // 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        broker.stop(root, hard=True)
        killed = log.read_text().count("\n")
        time.sleep(15)
        outage_lines = log.read_text().count("\n") - killed
        restarting = time.time()
        broker.start(root, port)  # returns once the broker serves requests
        ready = time.time()
        if source == "topic":  # a topic never ends: stop once everything is committed
            wait_for(kafka, topics, total, timeout_s=120)
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=180)
    text = log.read_text()
    assert code == 0, text[-3000:]
    keys = Counter(m.key for m in kafka_io.read_topic(kafka, "raw") + kafka_io.read_topic(kafka, "dlq"))
    assert len(keys) == total and max(keys.values()) == 1
    assert outage_lines < 30, text[-5000:]
    assert "Traceback" not in text
    first = _first_commit_after(text, restarting)
    print(f"\n{source} input outage: {outage_lines} log lines in 15 s down; broker restarted and serving after "
          f"{ready - restarting:.1f} s; first commit {first:.1f} s after the restart began")


def _first_commit_after(text: str, since: float) -> float:
    """Seconds from ``since`` (epoch) to the first 'transactions resumed' line, from the log's timestamps."""
    for line in text.splitlines():
        found = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*transactions resumed", line)
        if found:
            seconds = time.mktime(time.strptime(found.group(1)[:19], "%Y-%m-%d %H:%M:%S"))
            return seconds + int(found.group(1)[20:]) / 1000 - since
    raise AssertionError("no 'transactions resumed' line")

