"""The Flink-only peer: gpu_stage's extraction done by Flink SQL over ``llm.raw`` (the benchmark baseline).

It reads the raw bodies with the ``raw`` format, extracts every typed column it can with
``JSON_VALUE``/``JSON_QUERY`` (plus a regular expression for fenced content and the content JSON
Schema's checks as SQL) and writes the same typed columns, in the same Avro, to a typed topic. It is
what a Flink user would build instead of this product; its limits are listed in
:data:`bench.flink_peer_sql.NOT_PRODUCED` and :data:`bench.flink_peer_sql.DIVERGENCES`.

Run: ``python -m bench.flink_peer_raw --raw-topic llm.raw --typed-topic llm.typed.peer --from earliest
--until latest --parallelism 2``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bench.flink_peer_sql import (
    NOT_PRODUCED,
    candidate,
    content_error,
    content_row,
    fence_columns,
    first_of,
    inner_text,
    jv,
    keep,
    wrapper_columns,
)
from jobs import cli
from jobs.flink_env import insert_pipeline, register_table
from jobs.typed_table import TopicSource, kafka_properties, source_options, with_clause
from llmpipe import headers
from llmpipe.record import TypedRecord
from llmpipe.settings import env_option, topic_name

RAW = "raw_bodies"
SINK = "peer_typed"
DEFAULT_RAW_TOPIC = "llm.raw"

RAW_COLUMNS = (
    "`request_id` STRING",
    "`body` STRING",
    "`headers` MAP<STRING, BYTES> METADATA FROM 'headers'",
    "`raw_partition` INT METADATA FROM 'partition' VIRTUAL",
    "`raw_offset` BIGINT METADATA FROM 'offset' VIRTUAL",
    "`kafka_ts` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL",
)


def raw_table_ddl(name: str, source: TopicSource) -> str:
    """``llm.raw`` as (key, body text, headers, position, timestamp); no watermark (no windows here)."""
    options = source_options(source, "raw")
    for key in ("scan.watermark.idle-timeout", "scan.watermark.emit.strategy", "format"):
        options.pop(key)
    options.update({"key.format": "raw", "key.fields": "request_id", "value.format": "raw",
                    "value.fields-include": "EXCEPT_KEY"})
    body = ",\n  ".join(RAW_COLUMNS)
    return f"CREATE TEMPORARY TABLE `{name}` (\n  {body}\n) {with_clause(options)}"


def typed_sink_ddl(name: str, record: TypedRecord, source: TopicSource) -> str:
    """The typed topic as a sink: the record's columns, ``avro`` value, request id as the key."""
    options = {"connector": "kafka", "topic": source.topic, **kafka_properties(source.kafka),
               "key.format": "raw", "key.fields": "request_id", "value.format": "avro",
               "value.fields-include": "ALL", "sink.delivery-guarantee": "at-least-once"}
    body = ",\n  ".join(record.ddl_columns())
    return f"CREATE TEMPORARY TABLE `{name}` (\n  {body}\n) {with_clause(options)}"


_CHOICE0 = "$.choices[0]"
_MSG = (f"{_CHOICE0}.message", f"{_CHOICE0}.delta")


def body_query(raw: str) -> str:
    """Stage 1: top-level and first-choice fields, and the content's JSON candidate."""
    latency = f"CAST(`headers`['{headers.LATENCY_MS}'] AS STRING)"
    tool = f"{_CHOICE0}.message.tool_calls[0].function"
    return f"""
SELECT request_id, raw_partition, raw_offset, CAST(kafka_ts AS TIMESTAMP(3)) AS ingest_ts,
  {jv('body', '$.id')} AS completion_id,
  {jv('body', '$.object')} AS `object`,
  TRY_CAST({jv('body', '$.created')} AS BIGINT) AS created_s,
  {jv('body', '$.model')} AS model,
  {jv('body', f'{_CHOICE0}.finish_reason')} AS finish_reason,
  {jv('body', f'{_CHOICE0}.stop_reason')} AS stop_reason,
  {keep(first_of('body', *(m + '.content' for m in _MSG), f'{_CHOICE0}.text'))} AS content_text,
  {first_of('body', *(m + r for m in _MSG for r in ('.reasoning', '.reasoning_content')))} AS reasoning,
  {jv('body', tool + '.name')} AS tool_name,
  {jv('body', tool + '.arguments')} AS tool_args,
  {jv('body', f'{_CHOICE0}.index')} AS index0,
  CARDINALITY(JSON_QUERY(body, '$.choices' RETURNING ARRAY<STRING>)) AS num_choices,
  TRY_CAST({jv('body', '$.usage.prompt_tokens')} AS BIGINT) AS prompt_tokens,
  TRY_CAST({jv('body', '$.usage.completion_tokens')} AS BIGINT) AS completion_tokens,
  TRY_CAST({jv('body', '$.usage.total_tokens')} AS BIGINT) AS total_tokens,
  TRY_CAST({jv('body', '$.usage.prompt_tokens_details.cached_tokens')} AS BIGINT) AS cached_tokens,
  CASE WHEN REGEXP({latency}, '^[0-9]{{1,18}}$') THEN CAST({latency} AS BIGINT) END AS latency_ms,
  {jv('body', '$.system_fingerprint')} AS system_fingerprint,
  {jv('body', '$.service_tier')} AS service_tier,
  JSON_EXISTS(body, '$.error') AS has_error
FROM `{raw}`
WHERE body IS JSON OBJECT"""


def content_query(record: TypedRecord, bodies: str) -> str:
    """Stages 2-5: keep what gpu_stage would type, find the content's JSON, read each property once.

    Each stage is its own SELECT so that an expression used several times is computed once: Flink
    does not merge projections when that would duplicate a non-trivial expression.
    """
    kept = f"""
SELECT *, {', '.join(fence_columns('content_text'))} FROM ({bodies})
WHERE completion_id IS NOT NULL AND created_s IS NOT NULL AND created_s >= 0 AND num_choices IS NOT NULL
  AND `object` IN ('chat.completion', 'chat.completion.chunk', 'text_completion') AND NOT has_error"""
    inner = f"SELECT *, {keep(inner_text('content_text'))} AS inner_text FROM ({kept})"
    cand = f"SELECT *, {keep(candidate('inner_text'))} AS cand FROM ({inner})"
    wrapped = f"SELECT *, {', '.join(wrapper_columns(record.content_schema))} FROM ({cand})"
    return f"SELECT *, {keep(content_error(record.content_schema))} AS err FROM ({wrapped})"


def typed_query(record: TypedRecord, staged: str) -> str:
    """Stage 3: the typed columns in DDL order."""
    choice = record.row.fields[[f.name for f in record.row.fields].index("choices")].type.ddl()
    columns = {
        "created": "CAST(TO_TIMESTAMP_LTZ(created_s * 1000, 3) AS TIMESTAMP(3))",
        "tool_arguments": "CASE WHEN tool_args IS JSON OBJECT THEN JSON_QUERY(tool_args, '$') ELSE tool_args END",
        "tool_arguments_valid": "CASE WHEN tool_args IS NOT NULL THEN tool_args IS JSON OBJECT END",
        "num_choices": "CAST(num_choices AS INT)",
        "choices": (f"CASE WHEN num_choices = 1 THEN CAST(ARRAY[ROW(CAST(index0 AS INT), finish_reason, "
                    f"content_text)] AS {choice}) END"),
        "content": f"CASE WHEN cand IS NOT NULL AND err IS NULL THEN {content_row(record)} END",
        "content_valid": "CASE WHEN cand IS NOT NULL THEN err IS NULL END",
        "content_error": "err",
    }
    kinds = {f.name: f.type.ddl() for f in record.row.fields}
    select = []
    for name in record.field_names():
        if name in NOT_PRODUCED:
            select.append(f"CAST(NULL AS {kinds[name]}) AS `{name}`")
        else:
            select.append(f"{columns.get(name, f'`{name}`')} AS `{name}`")
    return f"SELECT {', '.join(select)} FROM ({staged})"


def query(record: TypedRecord, raw: str = RAW) -> str:
    """The whole peer extraction as one SELECT over the raw table."""
    return typed_query(record, content_query(record, body_query(raw)))


def build_job(t_env: Any, settings: cli.JobSettings, raw_topic: str = DEFAULT_RAW_TOPIC) -> Any:
    """Register the raw source and the typed sink; return the planned ``INSERT`` pipeline.

    ``settings.typed`` names the topic the peer *writes*; the raw source uses its connection and range.
    """
    raw = replace(settings.typed, topic=raw_topic)
    register_table(t_env, RAW, raw_table_ddl(RAW, raw))
    register_table(t_env, SINK, typed_sink_ddl(SINK, settings.record, settings.typed))
    return insert_pipeline(t_env, query(settings.record), SINK)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.flink_peer_raw``: ``--typed-topic`` is the output here."""
    p = cli.parser("bench.flink_peer_raw", __doc__, with_sink=False)
    env_option(p, "--raw-topic", "JOBS_RAW_TOPIC", default=DEFAULT_RAW_TOPIC, type=topic_name, old_envs=["RAW_TOPIC"],
               help="raw bodies topic")
    return cli.run_with_args(lambda t_env, s, args: build_job(t_env, s, args.raw_topic), p, argv)


if __name__ == "__main__":
    sys.exit(main())
