"""Typed columns that come from the Kafka record rather than the body: key, headers, position, time.

Headers are call facts written by the connector; a missing or unreadable header gives null, never a
dead letter, because the body itself is still a valid completion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from gpu_stage.transform.contract.extract import BadBody, string_map
from llmpipe import headers as hdr


def request_id(key: bytes | None) -> str | None:
    """The key as UTF-8 text; undecodable bytes become U+FFFD so the row stays writable."""
    return None if key is None else key.decode("utf-8", errors="replace")


def latency_ms(value: bytes | None) -> int | None:
    """``latency.ms``: ASCII decimal digits (at most 18), else null."""
    if value is None or not value.isdigit() or len(value) > 18:
        return None
    return int(value)


def attributes(value: bytes | None) -> dict[str, str | None] | None:
    """``attributes``: a JSON object; non-string values become compact JSON text; else null."""
    if value is None:
        return None
    try:
        decoded: Any = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(decoded, dict):
        return None
    try:
        return string_map(decoded, hdr.ATTRIBUTES)
    except BadBody:
        return None


def raw_header_values(record_headers: Sequence[tuple[str, bytes]]) -> tuple[bytes | None, bytes | None]:
    """The raw ``latency.ms`` and ``attributes`` header values of one record (the last one wins)."""
    latency = attr = None
    for name, value in record_headers:
        if name == hdr.LATENCY_MS:
            latency = value
        elif name == hdr.ATTRIBUTES:
            attr = value
    return latency, attr


def ingest_ts(timestamp_ms: int) -> int | None:
    """Kafka timestamp in ms; negative (Kafka's "no timestamp", -1) gives null."""
    return None if timestamp_ms < 0 else timestamp_ms


META_FIELDS = ("request_id", "latency_ms", "attributes", "raw_partition", "raw_offset", "ingest_ts")
"""Typed columns from the Kafka record, in the order :func:`meta_rows` returns them."""


def meta_rows(
    keys: Sequence[bytes | None],
    headers: Sequence[Sequence[tuple[str, bytes]]],
    partitions: Sequence[int],
    offsets: Sequence[int],
    timestamps_ms: Sequence[int],
) -> list[tuple[Any, ...]]:
    """Values of :data:`META_FIELDS` per record.

    Header values repeat across a batch (one connector, few experiments), so each distinct
    ``(latency.ms, attributes)`` pair is converted once; the results are read-only row values.
    """
    converted: dict[tuple[bytes | None, bytes | None], tuple[int | None, dict[str, str | None] | None]] = {}
    out: list[tuple[Any, ...]] = []
    for key, record_headers, partition, offset, ts in zip(
        keys, headers, partitions, offsets, timestamps_ms, strict=True
    ):
        latency, attr = raw_header_values(record_headers)
        pair = converted.get((latency, attr))
        if pair is None:
            pair = converted[latency, attr] = (latency_ms(latency), attributes(attr))
        out.append((request_id(key), *pair, partition, offset, ingest_ts(ts)))
    return out
