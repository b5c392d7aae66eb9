"""The Flink SQL peer (``bench.flink_peer_raw``'s query) over the bench corpus, with the same checksum.

The job's own source is Kafka; here the same SELECT reads the bodies from a file (``raw`` format, one
body per line) through a view shaped like its raw table, so the figure is Flink's extraction without a
broker. Job start-up costs seconds, which a capped record count cannot amortize, so two runs of
different sizes are timed and the marginal rate ``(n2 - n1) / (t2 - t1)`` is reported next to the
plain one. Flink reads ``raw`` values as text: bodies that are not UTF-8 would be repaired rather
than rejected, so those (and bodies with a newline) are left out of its input and of its reference.
Bodies over ``MAX_BODY_BYTES`` are left out too: the peer trims content with
``REGEXP_REPLACE(t, '^ws+|ws+$', '')``, which is quadratic in a run of whitespace, and the corpus's
space-padded long answers keep one task busy for minutes per record.
Java and PyFlink are imported only when this peer is asked for.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.checksum import Checksum

MAX_BODY_BYTES = 4096
VIEW = "bench_raw"
FILE_TABLE = "bench_lines"

_SUMS = """SELECT COUNT(*),
  SUM(CAST(TIMESTAMPDIFF(SECOND, TIMESTAMP '1970-01-01 00:00:00', created) AS BIGINT) * 1000),
  SUM(CAST(prompt_tokens AS BIGINT)), SUM(CAST(completion_tokens AS BIGINT)), SUM(CAST(total_tokens AS BIGINT)),
  SUM(CASE WHEN content_valid THEN 1 ELSE 0 END), SUM(CASE WHEN NOT content_valid THEN 1 ELSE 0 END),
  SUM(CAST(ROUND(`content`.`score` * 1000) AS BIGINT)), SUM(CARDINALITY(`content`.`topics`)),
  SUM(CASE WHEN tool_name IS NOT NULL THEN 1 ELSE 0 END), SUM(CASE WHEN tool_arguments_valid THEN 1 ELSE 0 END),
  SUM(CAST(CHAR_LENGTH(content_text) AS BIGINT)), SUM(CAST(CHAR_LENGTH(reasoning) AS BIGINT))
FROM ({query})"""


def java_available() -> bool:
    """Whether a JVM can be started for the embedded mini-cluster."""
    return shutil.which("java") is not None


def flink_input(values: list[bytes]) -> list[bytes]:
    """The bodies the Flink peer can be fed as lines (see the module docstring)."""
    out = []
    for value in values:
        if len(value) > MAX_BODY_BYTES or b"\n" in value or b"\r" in value:
            continue
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            continue
        out.append(value)
    return out


@dataclass
class FlinkRun:
    """Timings of the two runs and the checksum of the larger one."""

    records: int
    seconds: float
    marginal_records_per_s: float | None
    parallelism: int
    checksum: Checksum


def _register(t_env: Any, path: Path) -> None:
    from jobs.flink_env import register_table, register_view

    register_table(t_env, FILE_TABLE, f"CREATE TEMPORARY TABLE `{FILE_TABLE}` (body STRING) WITH "
                   f"('connector' = 'filesystem', 'path' = 'file://{path}', 'format' = 'raw')")
    register_view(t_env, VIEW, "SELECT CAST(NULL AS STRING) AS request_id, body, "
                  "MAP['latency.ms', X'313830'] AS `headers`, 0 AS raw_partition, "
                  "CAST(0 AS BIGINT) AS raw_offset, TO_TIMESTAMP_LTZ(1740000000000, 3) AS kafka_ts "
                  f"FROM `{FILE_TABLE}`")


def _timed(t_env: Any, sql: str, path: Path, lines: list[bytes]) -> tuple[float, tuple[Any, ...]]:
    from jobs.flink_env import collect_rows

    path.write_bytes(b"\n".join(lines) + b"\n")
    _register(t_env, path)
    start = time.perf_counter()
    rows = collect_rows(t_env, sql)
    return time.perf_counter() - start, rows[0]


def run(values: list[bytes], parallelism: int) -> FlinkRun:
    """Run the peer query over ``values`` (already filtered by :func:`flink_input`) and over a tenth."""
    from bench import flink_peer_raw as peer_raw
    from jobs.flink_env import FlinkSettings, table_env
    from llmpipe.record import TypedRecord

    t_env = table_env(FlinkSettings(streaming=False, parallelism=parallelism, load_jars=False))
    sql = _SUMS.format(query=peer_raw.query(TypedRecord.from_file(), VIEW))
    folder = Path(tempfile.mkdtemp(prefix="bench-flink-"))
    try:
        _timed(t_env, sql, folder / "warm.jsonl", values[:200])  # JVM, planner and mini-cluster start
        small = values[: max(1, len(values) // 10)]
        t_small, _ = _timed(t_env, sql, folder / "small.jsonl", small)
        t_all, sums = _timed(t_env, sql, folder / "all.jsonl", values)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    good = int(sums[0])
    checksum = Checksum(good, len(values) - good, *(int(v or 0) for v in sums[1:]))
    extra = t_all - t_small
    marginal = (len(values) - len(small)) / extra if extra > 0 else None
    return FlinkRun(len(values), t_all, None if marginal is None else round(marginal, 1), parallelism, checksum)
