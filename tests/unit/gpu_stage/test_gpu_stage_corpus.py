"""The real vLLM bodies the repository carries (``bench/real_bodies``, sources in its ``SOURCES.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpu_stage_testlib import decode_all

from gpu_stage.transform.batch import RawBatch
from gpu_stage.transform.contract.reference import ReferenceBackend
from gpu_stage.transform.native import NativeBackend

CORPUS = Path(__file__).resolve().parents[3] / "bench" / "real_bodies"
FILES = sorted(CORPUS.glob("*.json")) if CORPUS.is_dir() else []
pytestmark = pytest.mark.skipif(not FILES, reason=f"corpus folder {CORPUS} is absent")

# Written by reading the files, not by running the code.
EXPECTED: dict[str, dict[str, Any]] = {
    "01": {
        "completion_id": "cmpl-1df7ab1894b04a558bc5dbdc68efe936",
        "object": "text_completion",
        "created": 1741831566000,
        "model": "deepseek-r1-distill-llama-8b-l4",
        "content_text": " case for a function that returns the",
        "finish_reason": "length",
        "stop_reason": None,
        "num_choices": 1,
        "prompt_tokens": 6,
        "completion_tokens": 7,
        "total_tokens": 13,
        "cached_tokens": None,
        "content_valid": None,
        "extra": {},
    },
    "02": {"object": "text_completion", "content_text": " case", "finish_reason": None, "prompt_tokens": None},
    "05": {
        "object": "chat.completion.chunk",
        "content_text": "",
        "created": 1741831592000,
        "choices": [{"index": 0, "finish_reason": None, "content": ""}],
        "content_valid": None,
    },
    "06": {"content_text": "Okay", "finish_reason": None, "prompt_tokens": None},
    "07": {"content_text": "", "finish_reason": "stop", "stop_reason": None},
    "09": {"model": "Qwen/Qwen2.5-0.5B-Instruct", "service_tier": None, "extra": {}, "total_tokens": 253},
    "10": {
        "model": "internvl3_5",
        "content_text": "The text in the illustration is: **a tiger**",
        "reasoning": None,
        "tool_name": None,
        "tool_arguments": None,
        "tool_arguments_valid": None,
        "prompt_tokens": 107,
        "created": 1764924127000,
    },
    "11": {"content_text": "The text in the illustration is:\n\n**TONGYI Qwen**", "reasoning": None},
    "12": {"completion_id": "chatcmpl-9a60df2b23bb539f", "finish_reason": "length", "completion_tokens": 100},
    "13": {"completion_id": "chatcmpl-233dc076-9044-4c75-9cad-142004caa379", "prompt_tokens": 3606},
    "15": {
        "completion_id": "chatcmpl-d503646c-154d-4413-ba1c-cccba73effa7",
        "model": "phi-4-mini-instruct",
        "finish_reason": "length",
        "prompt_tokens": 17,
        "completion_tokens": 50,
        "total_tokens": 67,
        "created": 1764815768000,
    },
}


@pytest.fixture(scope="module", params=["reference", "cpu"])
def decoded(request: pytest.FixtureRequest) -> tuple[dict[str, dict[str, Any]], Any]:
    values = [p.read_bytes() for p in FILES]
    backend = ReferenceBackend() if request.param == "reference" else NativeBackend()
    result = backend.parse(RawBatch.of_values(values))
    rows = decode_all(result, backend.settings.record)
    return {FILES[i].name[:2]: row for i, row in rows.items()}, result


def test_every_corpus_body_is_accounted_for_once(decoded: Any) -> None:
    _rows, result = decoded
    assert len(result.encoded) + len(result.bad) == len(FILES)
    positions = result.encoded.rows.tolist() + [b.offset for b in result.bad]
    assert sorted(positions) == list(range(len(FILES)))


def test_all_real_bodies_are_good_rows(decoded: Any) -> None:
    rows, result = decoded
    assert result.bad == []
    assert len(rows) == len(FILES)


@pytest.mark.parametrize("prefix", sorted(EXPECTED))
def test_hand_written_expectations(prefix: str, decoded: Any) -> None:
    rows, _ = decoded
    row = rows[prefix]
    for column, expected in EXPECTED[prefix].items():
        assert row[column] == expected, column


def test_choices_mirror_first_choice(decoded: Any) -> None:
    rows, _ = decoded
    for row in rows.values():
        assert row["num_choices"] == len(row["choices"]) == 1
        first = row["choices"][0]
        assert first["content"] == row["content_text"]
        assert first["finish_reason"] == row["finish_reason"]
        assert first["index"] == 0
