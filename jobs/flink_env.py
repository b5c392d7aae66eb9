"""The one module that talks to Flink: builds TableEnvironments with the connector jars loaded.

Jobs receive the ``TableEnvironment`` and only speak SQL to it, so they stay testable with a local
mini-cluster and submittable unchanged with ``flink run -py``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pyflink.table import EnvironmentSettings, TableEnvironment

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
    if settings.streaming:
        mode = EnvironmentSettings.in_streaming_mode()
    else:
        mode = EnvironmentSettings.in_batch_mode()
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
