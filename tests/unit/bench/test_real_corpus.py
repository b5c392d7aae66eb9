"""The real-shaped and random-escape corpora: same seed same bytes, every kind there in its share.

The shares are read from the bodies themselves (``bench.traits`` and the native core's rows), not
from the generator's own counts.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import pytest

from bench import corpora, corpus, escape_corpus, real_corpus, traits
from bench.__main__ import parser as bench_parser
from gpu_stage.synth import batch
from gpu_stage.transform import NativeBackend, TransformSettings

RECORDS = 6000


@pytest.fixture(scope="module")
def real() -> corpus.Corpus:
    return real_corpus.generate(RECORDS, seed=5)


@pytest.fixture(scope="module")
def shares(real: corpus.Corpus) -> dict[str, float]:
    return {name: n / RECORDS for name, n in traits.count(real.values).items()}


def _rows(values: list[bytes]) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The native core's rows (decoded) and its dead letters by reason."""
    settings = TransformSettings()
    result = NativeBackend(settings).parse(batch(values))
    schema = fastavro.parse_schema(settings.record.avro)
    rows = [fastavro.schemaless_reader(io.BytesIO(datum), schema) for _, _, datum in result.encoded.items()]
    return rows, Counter(b.reason.value for b in result.bad)


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    first, again = real_corpus.generate(500, seed=9), real_corpus.generate(500, seed=9)
    assert first.sha256() == again.sha256()
    assert first.config == again.config
    assert real_corpus.generate(500, seed=10).sha256() != first.sha256()
    assert escape_corpus.escape_bodies(300, seed=9).sha256() == escape_corpus.escape_bodies(300, seed=9).sha256()
    assert escape_corpus.escape_bodies(300, seed=9).sha256() != escape_corpus.escape_bodies(300, seed=8).sha256()


def test_the_real_bodies_travel_with_their_sources() -> None:
    names = sorted(p.name for p in real_corpus.BODIES.glob("*.json"))
    assert len(names) == 15 and sorted(real_corpus.templates()) == [n[:2] for n in names]
    sources = (real_corpus.BODIES / "SOURCES.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in sources for name in names)
    for name in names:
        json.loads((real_corpus.BODIES / name).read_bytes())


def test_the_config_says_what_was_drawn(real: corpus.Corpus) -> None:
    config = real.config
    assert config["corpus"] == "real" and config["records"] == RECORDS and config["seed"] == 5
    assert sum(config["mix"]["kind"].values()) == pytest.approx(1.0)
    assert sum(config["mix"]["chat_content"].values()) == pytest.approx(1.0)
    assert sum(config["mix"]["serialization"].values()) == pytest.approx(1.0)
    kinds = {k: n for k, n in config["counts"].items() if k.startswith("kind: ")}
    assert sum(kinds.values()) == RECORDS
    assert set(config["templates"]) == set(real_corpus.templates())


def test_sizes_span_stream_chunks_to_long_reasoning(real: corpus.Corpus) -> None:
    facts = real.facts()
    good = [len(v) for v in real.values if traits.traits(v) != ["broken"]]
    assert 1100 <= facts["mean_body_bytes"] <= 1500
    assert min(good) < 300 and 10_000 < max(good) <= 24_000
    assert 500 <= facts["p50_body_bytes"] <= 1000
    assert sum(n > 5000 for n in good) / RECORDS > 0.02  # the long tail


@pytest.mark.parametrize(
    ("trait", "low", "high"),
    [
        ("kind: chat.completion", 0.62, 0.76),
        ("kind: chat.completion.chunk", 0.08, 0.16),
        ("kind: text_completion", 0.11, 0.19),  # text completions and their stream chunks
        ("kind: error", 0.015, 0.05),
        ("broken", 0.004, 0.02),
        ("body: \\u escapes", 0.05, 0.2),
        ("body: raw non-ASCII", 0.25, 0.55),
        ("layout: indented", 0.04, 0.12),
        ("layout: indented, sorted keys", 0.02, 0.08),
        ("content: JSON", 0.3, 0.5),
        ("content JSON: fenced", 0.04, 0.1),
        ("content JSON: indented", 0.08, 0.2),
        ("content JSON: escapes", 0.1, 0.3),
        ("content JSON: \\u escapes", 0.05, 0.18),
        ("content: prose", 0.3, 0.5),
        ("content: think", 0.03, 0.09),
        ("tool call", 0.06, 0.12),
        ("tool arguments: escapes", 0.02, 0.08),
        ("tool arguments: \\u escapes", 0.005, 0.04),
        ("reasoning field", 0.07, 0.16),
    ],
)
def test_each_kind_in_its_share(shares: dict[str, float], trait: str, low: float, high: float) -> None:
    assert low <= shares.get(trait, 0.0) <= high, shares


def test_escapes_at_both_levels(real: corpus.Corpus) -> None:
    values = real.values
    share = {
        pattern: sum(pattern in v for v in values) / RECORDS
        for pattern in (b'\\\\\\"', b"\\\\n", b"\\\\t", b"\\\\\\\\", b"\\\\u00e9", b"\\ud83d\\ude", b"C:\\\\")
    }
    assert all(s > 0.003 for s in share.values()), share


def test_content_and_bodies_the_pipeline_rejects(real: corpus.Corpus) -> None:
    rows, dead = _rows(real.values)
    errors = Counter(str(r["content_error"]).split(":")[0] for r in rows if r["content_valid"] is False)
    for code in ("enum", "maximum", "minimum", "additional", "missing", "type", "not_an_object", "invalid_json"):
        assert errors[code] > 0, errors
    assert 0.03 <= sum(errors.values()) / RECORDS <= 0.12
    assert dead["upstream_error"] == sum(t == "kind: error" for v in real.values for t in traits.traits(v))
    assert dead["invalid_json"] + dead["invalid_utf8"] == sum(traits.traits(v) == ["broken"] for v in real.values)
    long_reasoning = max(len(r["reasoning"] or "") for r in rows)
    assert 8_000 < long_reasoning <= real_corpus.MAX_TEXT_CHARS
    tools = [r for r in rows if r["tool_name"] is not None]
    assert any(r["tool_arguments_valid"] is False for r in tools)
    assert sum(r["tool_arguments_valid"] is True for r in tools) / len(tools) > 0.8


ESCAPES = {
    "quote": rb'(?<!\\)(?:\\\\)*\\"',
    "backslash": rb"\\\\",
    "solidus": rb"(?<!\\)(?:\\\\)*\\/",
    "backspace": rb"(?<!\\)(?:\\\\)*\\b",
    "form feed": rb"(?<!\\)(?:\\\\)*\\f",
    "newline": rb"(?<!\\)(?:\\\\)*\\n",
    "return": rb"(?<!\\)(?:\\\\)*\\r",
    "tab": rb"(?<!\\)(?:\\\\)*\\t",
    "control": rb"(?<!\\)(?:\\\\)*\\u00[01][0-9a-fA-F]",
    "CJK": rb"(?<!\\)(?:\\\\)*\\u[4-9][0-9a-fA-F]{3}",
    "surrogate pair": rb"(?<!\\)(?:\\\\)*\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}",
    "inner quote": rb'\\\\\\"',
    "inner \\u": rb"\\\\u[0-9a-fA-F]{4}",
    "inner \\u spelled": rb"\\u005[cC]u[0-9a-fA-F]{4}",
}


def test_escape_bodies_spell_every_escape_at_both_levels() -> None:
    made = escape_corpus.escape_bodies(2000, seed=3)
    found = {name: sum(bool(re.search(p, v)) for v in made.values) for name, p in ESCAPES.items()}
    assert all(n >= 10 for n in found.values()), found
    rows, dead = _rows(made.values)
    counts = made.config["counts"]
    assert dead["invalid_json"] == counts["lone surrogate in the body"] > 0
    invalid = sum(r["content_error"] == "invalid_json" or r["tool_arguments_valid"] is False for r in rows)
    assert invalid >= counts["lone surrogate in the JSON of a string"] > 0
    assert sum(r["content_valid"] is True for r in rows) > 500  # the escapes decode to valid content


def test_corpus_options_make_and_read_back_each_corpus(tmp_path: Path) -> None:
    for kind in corpora.KINDS:
        path = tmp_path / f"{kind}.bin"
        args = bench_parser().parse_args(["--corpus", kind, "--seed", "4", "--corpus-out", str(path)])
        made = corpora.load(args, 50)
        assert len(made.values) == 50 and made.config["corpus"] == kind
        back = corpora.load(bench_parser().parse_args(["--corpus-in", str(path)]), 50)
        assert back.sha256() == made.sha256() and back.config["corpus"] == kind
    assert corpora.make("generated", 50, 4).sha256() == corpus.generate(corpus.CorpusConfig(50, 4)).sha256()


def test_longest_drops_the_longer_bodies_and_says_how_many(tmp_path: Path) -> None:
    full = corpora.load(bench_parser().parse_args(["--seed", "4"]), 400)
    cap = sorted(map(len, full.values))[300]
    path = tmp_path / "short.bin"
    args = bench_parser().parse_args(["--seed", "4", "--longest", str(cap), "--corpus-out", str(path)])
    short = corpora.load(args, 400)
    expected = [v for v in full.values if len(v) <= cap]
    assert short.values == expected and short.config["dropped"] == 400 - len(expected) > 0
    assert corpora.load(bench_parser().parse_args(["--corpus-in", str(path)]), 400).values == expected
    with pytest.raises(SystemExit):
        corpora.check(bench_parser(), bench_parser().parse_args(["--longest", "0"]))


def test_sizes_only_go_with_the_generated_corpus() -> None:
    p = bench_parser()
    corpora.check(p, p.parse_args(["--corpus", "generated", "--sizes", "1024:1"]))
    with pytest.raises(SystemExit):
        corpora.check(p, p.parse_args(["--sizes", "1024:1"]))


def test_the_latency_benchmark_checks_the_corpus_options_before_any_broker() -> None:
    from bench import e2e_latency

    with pytest.raises(SystemExit) as refused:
        e2e_latency.main(["--bootstrap", "127.0.0.1:1", "--sizes", "1024:1"])
    assert refused.value.code == 2
