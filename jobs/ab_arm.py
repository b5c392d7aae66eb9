"""Per ``attributes['arm']`` (A/B test), 1-minute tumbling windows over ``llm.typed`` and ``llm.dlq``.

Columns: requests (typed records); errors (dead letters); tokens per request (mean ``total_tokens`` of
records with usage); mean latency; content-valid rate (records with ``content_valid = true`` over
requests; null in a window with errors only); error rate = errors / (requests + errors).

Joining the DLQ. A dead letter has no ``created`` (its body may not even be JSON), so its event time
is the DLQ record's Kafka timestamp, and its arm is read from the ``attributes`` header (the request
attributes JSON the connector puts on the raw record and on its own dead letters; gpu_stage copies the
raw record's headers onto its dead letters, as Kafka Connect's dead-letter queue does). A connector
dead letter without the header (written by an older connector) holds the request itself, so its arm
is read from the value's ``attributes``; any other dead letter without the header has no arm and is
not counted. The two inputs are unioned and windowed together,
so an arm with errors but no typed record in a minute still gets a row. The union's watermark is the
smaller of the two; keep ``--idle-timeout`` above the inputs' start-up skew, or a source that is merely
slow to start is declared idle and the other one's watermark makes its records late.

Run: ``python -m jobs.ab_arm --from earliest --until latest --print`` (see jobs/README.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from jobs import cli
from jobs.flink_env import insert_pipeline, register_table, register_view
from jobs.sinks import Output, sink_ddl
from jobs.typed_table import dlq_table_ddl, typed_table_ddl
from llmpipe import headers
from llmpipe.dlq import HEADER_STAGE, STAGE_CONNECTOR
from llmpipe.errors import ConfigError
from llmpipe.settings import env_option, topic_name

SOURCE = "typed"
DLQ = "dlq"
EVENTS = "ab_events"
SINK = "ab_arm_features"

OUTPUT = Output(
    (
        ("window_start", "TIMESTAMP(3)"),
        ("window_end", "TIMESTAMP(3)"),
        ("arm", "STRING"),
        ("requests", "BIGINT"),
        ("errors", "BIGINT"),
        ("tokens_per_request", "DOUBLE"),
        ("latency_ms_mean", "DOUBLE"),
        ("content_valid_rate", "DOUBLE"),
        ("error_rate", "DOUBLE"),
    ),
    key="arm",
)

EVENTS_QUERY = f"""
SELECT attributes['arm'] AS arm, created AS event_time, 1 AS ok, 0 AS err,
       total_tokens, latency_ms, content_valid
FROM `{SOURCE}` WHERE attributes['arm'] IS NOT NULL
UNION ALL
SELECT arm, event_time, 0 AS ok, 1 AS err,
       CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS BOOLEAN)
FROM (SELECT COALESCE(
               JSON_VALUE(CAST(`headers`['{headers.ATTRIBUTES}'] AS STRING), '$.arm'),
               CASE WHEN CAST(`headers`['{HEADER_STAGE}'] AS STRING) = '{STAGE_CONNECTOR}'
                    THEN JSON_VALUE(CAST(`value` AS STRING), '$.attributes.arm') END) AS arm,
             event_time
      FROM `{DLQ}`)
WHERE arm IS NOT NULL
"""

QUERY = f"""
SELECT
  window_start, window_end, arm,
  CAST(SUM(ok) AS BIGINT) AS requests,
  CAST(SUM(err) AS BIGINT) AS errors,
  AVG(CAST(total_tokens AS DOUBLE)) AS tokens_per_request,
  AVG(CAST(latency_ms AS DOUBLE)) AS latency_ms_mean,
  CASE WHEN SUM(ok) > 0
       THEN CAST(COUNT(*) FILTER (WHERE content_valid) AS DOUBLE) / SUM(ok) END AS content_valid_rate,
  CAST(SUM(err) AS DOUBLE) / COUNT(*) AS error_rate
FROM TABLE(TUMBLE(TABLE `{EVENTS}`, DESCRIPTOR(event_time), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, arm
"""


def build_job(t_env: Any, settings: cli.JobSettings) -> Any:
    """Register both sources, their union and the sink, and return the planned ``INSERT`` pipeline."""
    if settings.dlq is None:
        msg = "jobs.ab_arm needs the DLQ topic"
        raise ConfigError(msg)
    register_table(t_env, SOURCE, typed_table_ddl(SOURCE, settings.record, settings.typed))
    register_table(t_env, DLQ, dlq_table_ddl(DLQ, settings.dlq))
    register_view(t_env, EVENTS, EVENTS_QUERY)
    register_table(t_env, SINK, sink_ddl(SINK, OUTPUT, settings.sink, settings.typed.kafka))
    return insert_pipeline(t_env, QUERY, SINK)


def parser() -> argparse.ArgumentParser:
    """The shared job options plus ``--dlq-topic`` (``JOBS_DLQ_TOPIC``; ``DLQ_TOPIC`` honoured, with a warning)."""
    p = cli.parser("jobs.ab_arm", __doc__)
    env_option(p, "--dlq-topic", "JOBS_DLQ_TOPIC", old_envs=["DLQ_TOPIC"], default=cli.DEFAULT_DLQ_TOPIC,
               type=topic_name, help="dead-letter topic")  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jobs.ab_arm``."""
    return cli.run(build_job, parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
