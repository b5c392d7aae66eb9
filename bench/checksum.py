"""An order-free value checksum over the typed rows, so peers are shown to have done the same work.

A peer that skipped the nested content parse or the created→ms conversion would be faster for the
wrong reason; equal sums over the extracted values (and equal good/bad counts) rule that out. Every
field is an integer sum, so per-worker checksums add up to the whole corpus's.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Iterable
from dataclasses import astuple, dataclass, fields
from typing import Any


@dataclass
class Checksum:
    """Sums over good rows (and the bad count); two engines agree when all fields are equal."""

    good: int = 0
    bad: int = 0
    created_ms: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    content_valid: int = 0
    content_invalid: int = 0
    score_milli: int = 0
    topics: int = 0
    tools: int = 0
    tool_args_valid: int = 0
    text_chars: int = 0
    reasoning_chars: int = 0

    def __add__(self, other: Checksum) -> Checksum:
        return Checksum(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def as_dict(self) -> dict[str, int]:
        """Field name → sum, for the result JSON."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def add_row(
        self,
        created_ms: int,
        usage: tuple[int | None, int | None, int | None],
        content: dict[str, Any] | None,
        content_valid: bool | None,
        tool: tuple[str | None, bool | None],
        text: str | None,
        reasoning: str | None,
    ) -> None:
        """Account one good row."""
        self.good += 1
        self.created_ms += created_ms
        self.prompt_tokens += usage[0] or 0
        self.completion_tokens += usage[1] or 0
        self.total_tokens += usage[2] or 0
        if content_valid is True:
            self.content_valid += 1
        elif content_valid is False:
            self.content_invalid += 1
        if content is not None:
            self.score_milli += round(content["score"] * 1000)
            self.topics += len(content.get("topics") or ())
        if tool[0] is not None:
            self.tools += 1
        if tool[1]:
            self.tool_args_valid += 1
        self.text_chars += len(text or "")
        self.reasoning_chars += len(reasoning or "")


def _plain(schema: Any) -> Any:
    """The Avro schema without logical types, so ``created`` decodes as its int64 milliseconds."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    return [_plain(v) for v in schema] if isinstance(schema, list) else schema


def of_avro(datums: Iterable[bytes], bad: int, avro_schema: dict[str, Any]) -> Checksum:
    """Checksum of a backend's output, decoded with fastavro (not timed: it is the check, not the work)."""
    import fastavro

    parsed = fastavro.parse_schema(_plain(copy.deepcopy(avro_schema)))
    out = Checksum(bad=bad)
    for datum in datums:
        row: Any = fastavro.schemaless_reader(io.BytesIO(datum), parsed, None)
        out.add_row(
            row["created"],
            (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"]),
            row["content"],
            row["content_valid"],
            (row["tool_name"], row["tool_arguments_valid"]),
            row["content_text"],
            row["reasoning"],
        )
    return out
