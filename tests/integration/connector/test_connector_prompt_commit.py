"""Each finished response is committed on its own: a slow request holds back no other, and a crash
calls again only what was running or waiting for its transaction (real broker, simulator, subprocess)."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmpipe import headers as h
from llmpipe import kafka_io
from llmpipe.kafka_io import KafkaSettings

from .harness import (
    Topics,
    connector_cmd,
    count_committed,
    produce_requests,
    simulator,
    start,
    stop,
    wait_for,
    write_requests,
)

pytestmark = pytest.mark.integration

IN_FLIGHT = 64
TXN_RECORDS = 200
FAULTS = ("--rate-429", "0.02", "--rate-500", "0.02", "--rate-503", "0.02", "--rate-reset", "0.01",
          "--rate-truncate", "0.01", "--rate-hang", "0.01", "--hang-s", "4", "--retry-after-s", "0.2")  # fmt: skip


def _calls(url: str) -> Counter[str]:
    return Counter(httpx.get(f"{url}/sim/calls").json())


def _header_int(msg: kafka_io.Message, name: str) -> int:
    return int(dict(msg.headers)[name])


@pytest.mark.timeout(240)
def test_a_slow_request_holds_back_no_later_one(kafka: KafkaSettings, new_topic: Any, tmp_path: Path) -> None:
    topics = Topics(new_topic("req", 1), new_topic("raw"), new_topic("dlq"))
    ids = [f"s-{i:04d}" for i in range(400)]
    produce_requests(kafka, topics.requests, ids)
    with simulator("--seed", "11", "--ttft-ms", "5", "--rate-hang", "0.02", "--hang-s", "3") as url:
        cmd = connector_cmd(kafka, url, topics, f"slow-{topics.raw}", "--input-topic", topics.requests,
                            "--group-id", f"g-{topics.raw}", "--state-topic", new_topic("state"),
                            "--timeout-s", "20")  # fmt: skip
        proc = start(cmd, tmp_path / "connector.log")
        assert wait_for(kafka, topics, len(ids), timeout_s=120) == len(ids)
        assert stop(proc) == 0
    raw = kafka_io.read_topic(kafka, topics.raw)  # one partition: in commit order
    assert sorted(m.key for m in raw) == sorted(i.encode() for i in ids)
    order = [ids.index((m.key or b"").decode()) for m in raw]
    slow = [pos for pos, m in enumerate(raw) if _header_int(m, h.LATENCY_MS) >= 3000]
    assert slow, "the simulator hung no request: pick another seed"
    for pos in slow:
        index = order[pos]
        later_first = sum(1 for other in order[:pos] if other > index)
        # Every request read after the slow one finished within its 3 s and was committed before it.
        assert later_first >= min(50, len(ids) - 1 - index - len(slow)), (index, later_first)


def _written(kafka: KafkaSettings, topics: Topics) -> int:
    return sum(sum(kafka_io.end_offsets(kafka, topic).values()) for topic in (topics.raw, topics.dlq))


def _kill_rounds(cmd: list[str], kafka: KafkaSettings, topics: Topics, url: str, log: Path, total: int,
                 rounds: int) -> tuple[list[Counter[str]], list[int]]:  # fmt: skip
    """Start, let it commit some, SIGKILL; ``rounds`` times. Calls made by each run, committed at each kill."""
    rng = random.Random(7)
    runs: list[Counter[str]] = []
    committed: list[int] = []
    before = _calls(url)
    for round_ in range(rounds):
        proc = start(cmd, log)
        # End offsets are cheap to poll; they count aborted records too, so each run must add its own.
        target = _written(kafka, topics) + total // (2 * rounds)
        deadline = time.monotonic() + 60
        while _written(kafka, topics) < target and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 0.3))
        proc.kill()
        proc.wait()
        after = _calls(url)
        runs.append(after - before)
        before = after
        committed.append(count_committed(kafka, topics.raw, topics.dlq))
        assert committed[-1] < total, f"round {round_}: the run finished before it was killed"
    return runs, committed


@pytest.mark.timeout(420)
@pytest.mark.parametrize("source", ["topic", "file"])
def test_kills_under_faults_call_again_only_the_window(
    kafka: KafkaSettings, new_topic: Any, tmp_path: Path, source: str
) -> None:
    total, rounds = 3000, 5
    ids = [f"c-{i:05d}" for i in range(total)]
    topics = Topics(new_topic("req", 4), new_topic("raw"), new_topic("dlq"))
    if source == "topic":
        produce_requests(kafka, topics.requests, ids)
        where = ["--input-topic", topics.requests, "--group-id", f"g-{topics.raw}"]
    else:
        path = tmp_path / "requests.jsonl"
        write_requests(path, ids)
        where = ["--input-file", str(path)]
    log = tmp_path / "connector.log"
    with simulator("--seed", "5", "--ttft-ms", "40", *FAULTS) as url:
        cmd = connector_cmd(kafka, url, topics, f"crash-{topics.raw}", *where, "--state-topic", new_topic("state"),
                            "--timeout-s", "2", "--backoff-base-s", "0.05", "--max-in-flight", str(IN_FLIGHT),
                            "--max-txn-records", str(TXN_RECORDS))  # fmt: skip
        runs, committed = _kill_rounds(cmd, kafka, topics, url, log, total, rounds)
        proc = start(cmd, log)
        assert wait_for(kafka, topics, total, timeout_s=200) == total
        assert stop(proc) == 0
        runs.append(_calls(url) - sum(runs, Counter[str]()))
    keys = Counter(m.key for m in kafka_io.read_topic(kafka, topics.raw) + kafka_io.read_topic(kafka, topics.dlq))
    assert set(keys) == {i.encode() for i in ids} and max(keys.values()) == 1
    called_again = [sum(1 for key in run if any(key in later for later in runs[k + 1 :])) for k, run in enumerate(runs)]
    calls = sum(sum(run.values()) for run in runs)
    print(f"\n{source}: committed at kills {committed}; requests called again after each kill {called_again[:-1]}; "
          f"HTTP calls {calls} for {total} requests ({calls / total:.2f} per request)")  # fmt: skip
    assert 0 < committed[0] <= committed[-1]
    # Called again after a kill: the calls running at the kill and the finished ones not yet committed.
    assert max(called_again[:-1]) <= IN_FLIGHT + TXN_RECORDS
