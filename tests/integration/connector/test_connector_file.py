"""File input: bad lines go to the DLQ with reasons, the run goes on, and a rerun adds nothing."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llmpipe import kafka_io
from llmpipe.dlq import HEADER_OFFSET, HEADER_REASON
from llmpipe.kafka_io import KafkaSettings

from .harness import Topics, connector_cmd, simulator

pytestmark = pytest.mark.integration


def _lines() -> tuple[list[bytes], dict[int, str]]:
    good = [
        json.dumps({"request_id": f"f-{i}", "messages": [{"role": "user", "content": "x"}]}).encode()
        for i in range(300)
    ]
    bad = {
        10: (b"{this is not json", "invalid_json"),
        50: (json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), "missing_field"),
        90: (b'["a", "list"]', "not_an_object"),
        120: (
            json.dumps({"request_id": "huge", "messages": [{"role": "user", "content": "x" * 2_000_000}]}).encode(),
            "too_large",
        ),
        200: (b"\xff\xfe\x00garbage", "invalid_utf8"),
        250: (json.dumps({"request_id": 5, "messages": []}).encode(), "wrong_type"),
    }
    lines = list(good)
    for pos in sorted(bad):
        lines.insert(pos, bad[pos][0])
    return lines, {pos: reason for pos, (_, reason) in bad.items()}


@pytest.mark.timeout(180)
def test_bad_lines_to_dlq_and_rerun_is_idempotent(kafka: KafkaSettings, new_topic: Any, tmp_path: Path) -> None:
    lines, expected = _lines()
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    topics = Topics("", new_topic("raw"), new_topic("dlq"))
    state = new_topic("state")
    schema = Path(__file__).resolve().parents[3] / "llmpipe" / "schemas" / "default_content.schema.json"
    with simulator("--seed", "1") as url:
        cmd = connector_cmd(
            kafka,
            url,
            topics,
            f"file-{topics.raw}",
            "--input-file",
            str(path),
            "--state-topic",
            state,
            "--content-schema",
            str(schema),
        )
        first = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[3], timeout=120, check=False)
        second = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[3], timeout=120, check=False)
    assert first.returncode == 0 and second.returncode == 0
    raw = kafka_io.read_topic(kafka, topics.raw)
    dlq = kafka_io.read_topic(kafka, topics.dlq)
    assert sorted(m.key or b"" for m in raw) == sorted(f"f-{i}".encode() for i in range(300))
    got = {int(dict(m.headers)[HEADER_OFFSET]): dict(m.headers)[HEADER_REASON].decode() for m in dlq}
    assert got == expected
    schema_doc = json.loads(schema.read_text())
    for m in raw:
        content = json.loads(json.loads(m.value or b"")["choices"][0]["message"]["content"])
        assert set(schema_doc["required"]) <= set(content)
    assert Counter(m.key for m in raw)[b"f-0"] == 1
