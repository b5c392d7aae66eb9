"""The bench peers do the same work as gpu_stage's CPU backend: equal value checksums on one corpus.

The backend's checksum is taken from its Avro output (decoded with fastavro), so it is an independent
reading of the values, not the peers' own code run twice. Fixed sums on a tiny hand-made corpus pin
what the checksum adds up (created in ms, token sums, valid content, text lengths).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench import backends, checksum, corpus, peers
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.contract.reference import ReferenceBackend

SETTINGS = TransformSettings()


def cpu_checksum(values: list[bytes]) -> checksum.Checksum:
    run = backends.run(ReferenceBackend(SETTINGS), backends.batches(values, 500), True, SETTINGS)
    assert run.checksum is not None
    return run.checksum


@pytest.fixture(scope="module")
def small() -> corpus.Corpus:
    return corpus.generate(corpus.CorpusConfig(records=3000, bad_rate=0.05, invalid_content_rate=0.1))


def test_corpus_is_deterministic_and_round_trips(small: corpus.Corpus, tmp_path: Path) -> None:
    again = corpus.generate(corpus.CorpusConfig(records=3000, bad_rate=0.05, invalid_content_rate=0.1))
    assert again.sha256() == small.sha256()
    corpus.write(small, tmp_path / "c.bin")
    assert corpus.read(tmp_path / "c.bin").values == small.values
    assert any("订".encode() in v for v in small.values)


@pytest.mark.parametrize("name", sorted(peers.PEERS))
def test_peer_checksum_equals_the_cpu_backend(small: corpus.Corpus, name: str) -> None:
    want = cpu_checksum(small.values)
    assert want.bad > 100 and want.content_invalid > 0 and want.content_valid > 0 and want.tools > 0
    assert peers.run(name, small.values, 1).checksum == want
    assert peers.run(name, small.values, 2).checksum == want


@pytest.mark.parametrize("workers", [1, 2])
def test_peer_passes_give_the_median_pass_and_the_same_checksum(small: corpus.Corpus, workers: int) -> None:
    once = peers.run("orjson", small.values, workers)
    three = peers.run("orjson", small.values, workers, passes=3)
    assert three.checksum == once.checksum
    assert len(three.pass_seconds) == 3 and three.seconds == sorted(three.pass_seconds)[1]


def body(created: int, content: str | None, usage: tuple[int, int] | None = (3, 4), **extra: object) -> bytes:
    message = {"role": "assistant", "content": content, **extra}
    out: dict[str, object] = {"id": "c", "object": "chat.completion", "created": created, "model": "m",
                              "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    if usage is not None:
        out["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return orjson.dumps(out)


def test_known_sums() -> None:
    values = [
        body(1740000000, '```json\n{"sentiment":"neutral","score":0.25,"risk_level":"low","topics":["a"]}\n```'),
        body(1740000001, '{"sentiment":"happy","score":0.5,"risk_level":"low"}', usage=None),
        body(1740000002, "plain words", reasoning="why"),
        b'{"id":"x","object":"chat.completion","created":"yesterday","choices":[]}',
        b"data: {}",
    ]
    want = checksum.Checksum(
        good=3, bad=2, created_ms=3 * 1740000000000 + 3000, prompt_tokens=6, completion_tokens=8, total_tokens=14,
        content_valid=1, content_invalid=1, score_milli=250, topics=1, tools=0, tool_args_valid=0,
        text_chars=sum(len(orjson.loads(v)["choices"][0]["message"]["content"]) for v in values[:3]),
        reasoning_chars=3,
    )
    assert cpu_checksum(values) == want
    for name in peers.PEERS:
        assert peers.run(name, values, 1).checksum == want


def test_a_warps_longest_body_is_measured_over_whole_warps() -> None:
    # Two warps: one of equal bodies (longest = mean), one with a body 33x its neighbours; a short tail.
    values = [b"x" * 10] * 32 + [b"x" * 10] * 31 + [b"x" * 330] + [b"x" * 999] * 5
    mean = (32 * 10 + 31 * 10 + 330) / 64
    assert corpus.warp_longest_to_mean(values) == round((10 + 330) / 2 / mean, 3)
    assert corpus.warp_longest_to_mean([b"abc"] * 64) == 1.0
    assert corpus.warp_longest_to_mean([b"abc"] * 31) == 1.0
