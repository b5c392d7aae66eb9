"""Per model, 1-minute tumbling windows over ``llm.typed`` (event time = ``created``).

Columns: requests; prompt/completion/total token sums (null when no record of the window has usage);
mean and max latency; the shares of requests whose first choice stopped on ``length``, whose content
was JSON that failed the schema or did not parse (``content_valid = false``; prose counts as not
invalid) and that called a tool; and the generation speed of valid-JSON completions: their completion
tokens divided by their latency in seconds (records with a latency and a token count only; null
when there are none). Shares are over all requests of the window, so they add up across models.

Run: ``python -m jobs.model_minute --from earliest --until latest --print`` (see jobs/README.md).
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
SINK = "model_minute_features"

OUTPUT = Output(
    (
        ("window_start", "TIMESTAMP(3)"),
        ("window_end", "TIMESTAMP(3)"),
        ("model", "STRING"),
        ("requests", "BIGINT"),
        ("prompt_tokens", "BIGINT"),
        ("completion_tokens", "BIGINT"),
        ("total_tokens", "BIGINT"),
        ("latency_ms_mean", "DOUBLE"),
        ("latency_ms_max", "BIGINT"),
        ("length_share", "DOUBLE"),
        ("invalid_json_share", "DOUBLE"),
        ("tool_call_share", "DOUBLE"),
        ("valid_json_tokens_per_s", "DOUBLE"),
    ),
    key="model",
)

_SPEED = "content_valid AND latency_ms > 0 AND completion_tokens IS NOT NULL"

QUERY = f"""
SELECT
  window_start, window_end, model,
  COUNT(*) AS requests,
  SUM(prompt_tokens) AS prompt_tokens,
  SUM(completion_tokens) AS completion_tokens,
  SUM(total_tokens) AS total_tokens,
  AVG(CAST(latency_ms AS DOUBLE)) AS latency_ms_mean,
  MAX(latency_ms) AS latency_ms_max,
  CAST(COUNT(*) FILTER (WHERE finish_reason = 'length') AS DOUBLE) / COUNT(*) AS length_share,
  CAST(COUNT(*) FILTER (WHERE content_valid = FALSE) AS DOUBLE) / COUNT(*) AS invalid_json_share,
  CAST(COUNT(*) FILTER (WHERE tool_name IS NOT NULL OR tool_arguments IS NOT NULL) AS DOUBLE)
    / COUNT(*) AS tool_call_share,
  CAST(SUM(completion_tokens) FILTER (WHERE {_SPEED}) AS DOUBLE) * 1000
    / SUM(latency_ms) FILTER (WHERE {_SPEED}) AS valid_json_tokens_per_s
FROM TABLE(TUMBLE(TABLE `{SOURCE}`, DESCRIPTOR(created), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end, model
"""


def build_job(t_env: Any, settings: cli.JobSettings) -> Any:
    """Register the typed source and the sink, and return the planned ``INSERT`` pipeline."""
    register_table(t_env, SOURCE, typed_table_ddl(SOURCE, settings.record, settings.typed))
    register_table(t_env, SINK, sink_ddl(SINK, OUTPUT, settings.sink, settings.typed.kafka))
    return insert_pipeline(t_env, QUERY, SINK)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jobs.model_minute``."""
    return cli.run(build_job, cli.parser("jobs.model_minute", __doc__), argv)


if __name__ == "__main__":
    sys.exit(main())
