"""``python -m jobs.sql_init``: a Flink SQL Client init file for the pipeline's topics.

A SQL user starts from the same tables the jobs read, generated from the one schema: the typed topic
(its columns from :class:`~llmpipe.record.TypedRecord`, the watermark on ``created``, committed reads
only), the dead-letter topic, and one view per feature job over the features topic. Use it as
``sql-client.sh -i init.sql`` (or paste it into a SQL Gateway session): nothing is hand-copied, so a
new content schema gives a new file, never a table that silently disagrees with the records.

The features topic holds the rows of every job (each keyed by its entity); each job's view keeps the
rows that have its key column. The sink is transactional by default, and these tables read committed
records only, so an aborted attempt is never seen. No password is written: the file says
``<KAFKA_SASL_PASSWORD>`` (or ``<SCHEMA_REGISTRY_PASSWORD>``) where it goes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from jobs import ab_arm, cli, model_minute, user_risk
from jobs.sinks import Output
from jobs.typed_table import (
    TopicSource,
    dlq_table_ddl,
    kafka_properties,
    typed_table_ddl,
    with_clause,
    without_secrets,
)
from llmpipe.errors import ConfigError
from llmpipe.settings import env_option, parse_args, topic_name

TYPED, DLQ, FEATURES = "typed", "dlq", "features"
JOB_OUTPUTS: dict[str, Output] = {
    "model_minute": model_minute.OUTPUT,
    "user_risk": user_risk.OUTPUT,
    "ab_arm": ab_arm.OUTPUT,
}
"""Each feature job's output columns, as its sink declares them."""


def features_columns() -> list[tuple[str, str]]:
    """The union of the jobs' output columns in first-seen order (the topic's JSON fields)."""
    seen: dict[str, str] = {}
    for output in JOB_OUTPUTS.values():
        for name, sql in output.columns:
            if seen.setdefault(name, sql) != sql:
                msg = f"feature column {name} has two types: {seen[name]} and {sql}"
                raise ConfigError(msg)
    return list(seen.items())


def features_table_ddl(name: str, topic: str, source: TopicSource) -> str:
    """The features topic as a source: JSON values, committed reads, a missing field reads as NULL."""
    options = {
        "connector": "kafka",
        "topic": topic,
        **kafka_properties(source.kafka),
        "properties.isolation.level": "read_committed",
        **source.read.options(),
        "format": "json",
        "json.fail-on-missing-field": "false",
        "json.ignore-parse-errors": "false",
        "json.timestamp-format.standard": "ISO-8601",
    }
    body = ",\n  ".join(f"`{column}` {sql}" for column, sql in features_columns())
    return f"CREATE TEMPORARY TABLE `{name}` (\n  {body}\n) {with_clause(options)}"


def job_view_ddl(job: str, output: Output) -> str:
    """One job's rows of the features table: those that have its key column."""
    columns = ", ".join(f"`{name}`" for name in output.names())
    return (f"CREATE TEMPORARY VIEW `{job}_features` AS\n  SELECT {columns} FROM `{FEATURES}` "
            f"WHERE `{output.key}` IS NOT NULL")


def init_sql(settings: cli.JobSettings, features_topic: str) -> str:
    """The whole init file: session settings, then one statement per table or view, each ending in ``;``."""
    settings = replace(settings, typed=without_secrets(settings.typed),
                       dlq=None if settings.dlq is None else without_secrets(settings.dlq))
    statements = [
        "SET 'table.local-time-zone' = 'UTC'",
        typed_table_ddl(TYPED, settings.record, settings.typed),
    ]
    if settings.dlq is not None:
        statements.append(dlq_table_ddl(DLQ, settings.dlq))
    statements.append(features_table_ddl(FEATURES, features_topic, settings.typed))
    statements += [job_view_ddl(job, output) for job, output in JOB_OUTPUTS.items()]
    head = (f"-- Flink SQL Client init file (python -m jobs.sql_init): typed topic {settings.typed.topic}, "
            f"schema fingerprint {settings.record.fingerprint}\n")
    return head + "".join(f"{statement};\n\n" for statement in statements)


def parser() -> argparse.ArgumentParser:
    """The jobs' shared options (topics, range, watermark), ``--dlq-topic`` and ``--output``."""
    p = cli.parser("jobs.sql_init", __doc__)
    env_option(p, "--dlq-topic", "JOBS_DLQ_TOPIC", default=cli.DEFAULT_DLQ_TOPIC, type=topic_name,
               help="dead-letter topic")
    p.add_argument("--output", type=Path, help="write the file here instead of stdout")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Print (or write) the init file; exit 2 with one line on a bad option. Needs no cluster."""
    p = parser()
    try:
        args = parse_args(p, argv)
        settings = cli.settings_from_args(args)
        text = init_sql(settings, args.features_topic)
    except ConfigError as exc:
        sys.stderr.write(f"jobs.sql_init: {exc}\n")
        return 2
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
