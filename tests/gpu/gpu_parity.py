"""Helpers for the GPU tier: build both backends once and compare their results exactly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpu_stage.transform.backends import gpu_unusable_reason
from gpu_stage.transform.batch import ParseResult

REASON = gpu_unusable_reason()
CORPUS = Path(os.environ.get("VLLM_REAL_DIR", Path(__file__).resolve().parents[2] / "bench" / "real_bodies"))


def dead_letters(result: ParseResult) -> list[tuple[Any, ...]]:
    return [(b.reason, b.error, b.partition, b.offset, b.raw, b.key, b.topic, b.stage) for b in result.bad]


def assert_same(cpu: ParseResult, gpu: ParseResult) -> None:
    """Byte-identical encoded rows (buffer, offsets, positions, keys) and identical dead letters."""
    assert gpu.encoded.rows.tolist() == cpu.encoded.rows.tolist()
    assert gpu.encoded.offsets.tolist() == cpu.encoded.offsets.tolist()
    assert gpu.encoded.keys == cpu.encoded.keys
    assert gpu.encoded.buf == cpu.encoded.buf
    assert dead_letters(gpu) == dead_letters(cpu)


def first_difference(cpu: ParseResult, gpu: ParseResult) -> str | None:
    """A short description of the first differing row, for failure messages."""
    cpu_rows = {p: v for p, _k, v in cpu.encoded.items()}
    gpu_rows = {p: v for p, _k, v in gpu.encoded.items()}
    for p in sorted(set(cpu_rows) | set(gpu_rows)):
        if cpu_rows.get(p) != gpu_rows.get(p):
            return f"position {p}: cpu {cpu_rows.get(p)!r:.300} gpu {gpu_rows.get(p)!r:.300}"
    for a, b in zip(dead_letters(cpu), dead_letters(gpu), strict=False):
        if a != b:
            return f"dead letter: cpu {a[:4]} gpu {b[:4]}"
    return None
