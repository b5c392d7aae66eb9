"""Per ``attributes['user_id']``, 5-minute windows sliding by 1 minute (HOP) over ``llm.typed``.

Columns: requests; mean content score (over records whose content has a score; null for a user with
none); number of records whose content says ``risk_level = high``; and the latest risk level: the
non-null ``content.risk_level`` of the record with the greatest ``created`` (event time, not arrival
order), ties — frequent, as ``created`` has 1-second resolution — broken by ingest time, then raw
offset. Records without a ``user_id`` attribute belong to no user and are left out.

Run: ``python -m jobs.user_risk --from earliest --until latest --print`` (see jobs/README.md).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from jobs import cli
from jobs.flink_env import insert_pipeline, register_table
from jobs.sinks import Output, sink_ddl
from jobs.typed_table import typed_table_ddl

SOURCE = "typed"
SINK = "user_risk_features"

OUTPUT = Output(
    (
        ("window_start", "TIMESTAMP(3)"),
        ("window_end", "TIMESTAMP(3)"),
        ("user_id", "STRING"),
        ("requests", "BIGINT"),
        ("score_mean", "DOUBLE"),
        ("high_risk", "BIGINT"),
        ("latest_risk_level", "STRING"),
    ),
    key="user_id",
)

_TS = "'yyyy-MM-dd HH:mm:ss.SSS'"
_NO_TS = "'0000-00-00 00:00:00.000'"
LATEST_KEY = (
    f"DATE_FORMAT(created, {_TS}) || COALESCE(DATE_FORMAT(ingest_ts, {_TS}), {_NO_TS})"
    " || LPAD(CAST(COALESCE(raw_offset, 0) AS STRING), 20, '0') || content.risk_level"
)
"""A string whose maximum is the latest record's risk level: 23 + 23 + 20 sortable characters, then
the level (null when the level is null, so MAX skips it). Flink SQL has no ARG_MAX, and LAST_VALUE
follows arrival order, which is wrong for out-of-order records."""
LEVEL_AT = 23 + 23 + 20 + 1

QUERY = f"""
SELECT
  window_start, window_end, user_id,
  COUNT(*) AS requests,
  AVG(score) AS score_mean,
  COUNT(*) FILTER (WHERE risk_level = 'high') AS high_risk,
  SUBSTRING(MAX(latest_key) FROM {LEVEL_AT}) AS latest_risk_level
FROM (
  SELECT window_start, window_end, attributes['user_id'] AS user_id, content.score AS score,
         content.risk_level AS risk_level, {LATEST_KEY} AS latest_key
  FROM TABLE(HOP(TABLE `{SOURCE}`, DESCRIPTOR(created), INTERVAL '1' MINUTE, INTERVAL '5' MINUTE))
)
WHERE user_id IS NOT NULL
GROUP BY window_start, window_end, user_id
"""


def build_job(t_env: Any, settings: cli.JobSettings) -> Any:
    """Register the typed source and the sink, and return the planned ``INSERT`` pipeline."""
    register_table(t_env, SOURCE, typed_table_ddl(SOURCE, settings.record, settings.typed))
    register_table(t_env, SINK, sink_ddl(SINK, OUTPUT, settings.sink, settings.typed.kafka))
    return insert_pipeline(t_env, QUERY, SINK)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jobs.user_risk``."""
    return cli.run(build_job, cli.parser("jobs.user_risk", __doc__), argv)


if __name__ == "__main__":
    sys.exit(main())
