"""The local schema registry (``stack.registry``): start, answer, stop only what it started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from llmpipe.record import TypedRecord
from llmpipe.registry import RegistryClient
from stack import registry

pytestmark = pytest.mark.integration


def test_start_serves_the_confluent_api_and_stop_ends_it(tmp_path: Path) -> None:
    root = tmp_path / "reg"
    run = registry.start(root)
    try:
        pid = run.pid()
        assert pid is not None
        assert registry.start(root).pid() == pid  # already running: the same process
        assert httpx.get(f"{run.url()}/subjects").json() == []
        record = TypedRecord.from_file()
        with RegistryClient(run.url()) as client:
            first = client.register("some.topic-value", record.avro)
            assert client.register("some.topic-value", record.avro) == first  # idempotent
            assert client.schema(first) == record.avro
    finally:
        assert registry.stop(root)
    assert run.pid() is None
    assert not registry.stop(root)  # nothing left to stop


def test_stop_leaves_a_process_it_did_not_start(tmp_path: Path) -> None:
    root = tmp_path / "reg"
    root.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        registry.RegistryDir(root).pid_file.write_text(str(other.pid))  # a stale file naming another process
        assert not registry.stop(root)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
