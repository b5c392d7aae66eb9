"""Shared test vectors: raw records with hand-written expectations, for every backend.

The vectors live in ``tests/vectors/*.jsonl`` (one JSON object per line) plus a few generated ones
that are too big to store (a 10 MB body, deep nesting). Each backend's tests load them here, build a
:class:`RawBatch` and compare their output with the expectations and with each other's bytes.

Line format: ``name``; the body as ``body`` (text, written as UTF-8) or ``body_hex`` (any bytes);
optional ``key``, ``headers`` (list of ``[name, text]``), ``partition``, ``offset``, ``timestamp_ms``;
and ``expect``: either ``{"bad": reason, "error": text}`` or ``{"fields": {column: value, ...}}`` with
``created``/``ingest_ts`` as epoch milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gpu_stage.transform.batch import RawBatch

DEFAULT_DIR = Path(__file__).resolve().parent
DEEP_OK = 1000
COPY_DEPTH = 254
DEEP_TOO_DEEP = 2000
TEN_MB = 10 * 1024 * 1024


@dataclass(frozen=True)
class Vector:
    """One raw record and what the transform must make of it."""

    name: str
    value: bytes
    expect: dict[str, Any]
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    partition: int = 0
    offset: int = 0
    timestamp_ms: int = 0


def _from_line(obj: dict[str, Any]) -> Vector:
    value = bytes.fromhex(obj["body_hex"]) if "body_hex" in obj else obj["body"].encode("utf-8")
    key = obj.get("key")
    return Vector(
        name=obj["name"],
        value=value,
        expect=obj["expect"],
        key=None if key is None else key.encode("utf-8"),
        headers=[(h, v.encode("utf-8")) for h, v in obj.get("headers", [])],
        partition=obj.get("partition", 0),
        offset=obj.get("offset", 0),
        timestamp_ms=obj.get("timestamp_ms", 0),
    )


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def generated() -> list[Vector]:
    """Vectors too big to store: a 10 MB body, nesting at and beyond the supported depths."""
    envelope = '{"id":"cmpl-deep","object":"text_completion","created":1700000000,"choices":[],'
    invalid = "invalid_json"
    return [
        Vector(
            "generated_depth_254_in_unknown_field",
            (envelope + '"deep":' + _nested(COPY_DEPTH) + "}").encode(),
            {"fields": {"num_choices": 0, "extra": {"deep": _nested(COPY_DEPTH)}}},
        ),
        Vector(
            "generated_depth_1000_in_unknown_field",
            (envelope + '"deep":' + _nested(DEEP_OK - 1) + "}").encode(),
            {"bad": invalid, "error": "deep: nesting deeper than 254 levels"},
        ),
        Vector(
            "generated_depth_1000_in_ignored_field",
            (envelope + '"prompt_logprobs":' + _nested(DEEP_OK - 1) + "}").encode(),
            {"fields": {"num_choices": 0, "extra": {}}},
        ),
        Vector(
            "generated_depth_2000",
            _nested(DEEP_TOO_DEEP).encode(),
            {"bad": invalid, "error": "body is not valid JSON"},
        ),
        Vector(
            "generated_10mb",
            (envelope + '"pad":"' + "x" * TEN_MB + '"}').encode(),
            {"bad": "too_large", "error": "body larger than max_record_bytes"},
        ),
    ]


def load_vectors(root: Path | None = None, *, include_generated: bool = True) -> list[Vector]:
    """Every vector under ``root`` (default: the repository's ``tests/vectors``), file by file."""
    directory = root or DEFAULT_DIR
    vectors: list[Vector] = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            if line.strip():
                vectors.append(_from_line(orjson.loads(line)))
    if include_generated:
        vectors.extend(generated())
    return vectors


def batch_of(vectors: Sequence[Vector] | Iterable[Vector], topic: str = "llm.raw") -> RawBatch:
    """One batch holding the vectors in order."""
    items = list(vectors)
    return RawBatch(
        values=[v.value for v in items],
        keys=[v.key for v in items],
        headers=[v.headers for v in items],
        topic=topic,
        partitions=[v.partition for v in items],
        offsets=[v.offset for v in items],
        timestamps_ms=[v.timestamp_ms for v in items],
    )
