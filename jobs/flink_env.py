"""The one module that talks to Flink: builds TableEnvironments with the connector jars loaded.

Jobs receive the ``TableEnvironment`` and only speak SQL to it, so they stay testable with a local
mini-cluster and submittable unchanged with ``flink run -py``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError
from pyflink.table import EnvironmentSettings, TableEnvironment

from llmpipe.errors import PipelineError
from stack.jars import flink_jar_urls

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlinkSettings:
    """How the TableEnvironment runs."""

    streaming: bool = True
    parallelism: int = 1
    checkpoint_interval_ms: int | None = None
    load_jars: bool = True


def table_env(settings: FlinkSettings) -> TableEnvironment:
    """A TableEnvironment (embedded mini-cluster unless submitted to a cluster) with our jars on it."""
    mode = EnvironmentSettings.in_streaming_mode() if settings.streaming else EnvironmentSettings.in_batch_mode()
    t_env = TableEnvironment.create(mode)
    config = t_env.get_config()
    if settings.load_jars:
        config.set("pipeline.jars", flink_jar_urls())
    config.set("parallelism.default", str(settings.parallelism))
    config.set("table.exec.resource.default-parallelism", str(settings.parallelism))
    config.set("table.local-time-zone", "UTC")
    if settings.checkpoint_interval_ms:
        config.set("execution.checkpointing.interval", f"{settings.checkpoint_interval_ms} ms")
    return t_env


def collect_rows(t_env: TableEnvironment, query: str) -> list[tuple[Any, ...]]:
    """Run a bounded query and return its rows as tuples (tests, ``--print`` runs)."""
    result = t_env.execute_sql(query)
    with result.collect() as rows:
        return [tuple(row) for row in rows]


class JobError(PipelineError):
    """Flink rejected a statement or a job failed; the Java error is the cause."""


def register_table(t_env: TableEnvironment, name: str, ddl: str) -> None:
    """(Re)create a session-scoped table: jobs own their temporary tables, so a rebuild replaces them."""
    try:
        t_env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS `{name}`")
        t_env.execute_sql(ddl)
    except Py4JError as exc:
        msg = f"cannot create table {name}: {_java_message(exc)}"
        raise JobError(msg) from exc


def register_view(t_env: TableEnvironment, name: str, query: str) -> None:
    """(Re)create a session-scoped view, e.g. a union that a window TVF then reads by name."""
    try:
        t_env.execute_sql(f"DROP TEMPORARY VIEW IF EXISTS `{name}`")
        t_env.execute_sql(f"CREATE TEMPORARY VIEW `{name}` AS {query}")
    except Py4JError as exc:
        msg = f"cannot create view {name}: {_java_message(exc)}"
        raise JobError(msg) from exc


def insert_pipeline(t_env: TableEnvironment, query: str, sink: str) -> Any:
    """The ``INSERT INTO sink <query>`` pipeline (a PyFlink ``TablePipeline``), planned but not run."""
    try:
        return t_env.sql_query(query).insert_into(sink)
    except Py4JError as exc:
        msg = f"cannot plan the job into {sink}: {_java_message(exc)}"
        raise JobError(msg) from exc


def execute(pipeline: Any, wait: bool = True) -> None:
    """Submit a pipeline (embedded mini-cluster, or the cluster under ``flink run``) and wait if asked."""
    try:
        result = pipeline.execute()
        if wait:
            result.wait()
    except Py4JError as exc:
        msg = f"job failed: {_java_message(exc)}"
        raise JobError(msg) from exc


def _java_message(exc: Py4JError) -> str:
    """The innermost ``Caused by`` line of a Java error: the readable part of a long stack trace."""
    lines = [line for line in str(exc).splitlines() if "Exception:" in line or "Error:" in line]
    return lines[-1].strip() if lines else str(exc)[:500]
