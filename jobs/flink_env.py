"""The one module that talks to Flink: builds TableEnvironments with the connector jars loaded.

Jobs receive the ``TableEnvironment`` and only speak SQL to it, so they stay testable with a local
mini-cluster and submittable unchanged with ``flink run -py``.

Running a job (:func:`execute`): on the embedded mini-cluster and under an attached ``flink run`` the
client waits for the job; under ``flink run --detached`` (``execution.attached = false``) or with
``--detach`` it returns once the job is submitted, so a loop of submissions does not stop at the
first streaming job. A job cancelled from outside (``flink cancel``, REST, the web UI) ends the wait
with :class:`JobCancelled`, an expected end that the caller logs as one INFO line, not a Java trace;
ctrl-C while waiting cancels the job first (``JobCancelled`` with ``interrupted`` set).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError
from pyflink.table import EnvironmentSettings, TableEnvironment
from pyflink.util.exceptions import JavaException

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
    job_name: str | None = None
    """``pipeline.name``: what ``python -m jobs.submit`` looks for on the cluster (``llmpipe.<job>``)."""
    detach: bool = False
    """Return once the job is submitted, as under ``flink run --detached``."""


def table_env(settings: FlinkSettings) -> TableEnvironment:
    """A TableEnvironment (embedded mini-cluster unless submitted to a cluster) with our jars on it."""
    mode = EnvironmentSettings.in_streaming_mode() if settings.streaming else EnvironmentSettings.in_batch_mode()
    with keep_root_log_level():
        t_env = TableEnvironment.create(mode)
    config = t_env.get_config()
    if settings.load_jars:
        config.set("pipeline.jars", flink_jar_urls())
    config.set("parallelism.default", str(settings.parallelism))
    config.set("table.exec.resource.default-parallelism", str(settings.parallelism))
    config.set("table.local-time-zone", "UTC")
    if settings.checkpoint_interval_ms:
        config.set("execution.checkpointing.interval", f"{settings.checkpoint_interval_ms} ms")
    if settings.job_name:
        config.set("pipeline.name", settings.job_name)
    if str(config.get("execution.target", "local")) == "local":
        # Embedded mini-cluster: when a job is cancelled, the Kafka connector's admin thread may still log
        # after the job's class loader closed; Flink's leak check then makes log4j print errors and traces
        # for what is a normal end. The process ends with the job, so there is no leak to catch.
        config.set("classloader.check-leaked-classloader", "false")
        if settings.detach:
            log.warning("--detach without a cluster (flink run): the embedded job ends when this process does")
    if settings.detach:
        config.set("execution.attached", "false")
    return t_env


def collect_rows(t_env: TableEnvironment, query: str) -> list[tuple[Any, ...]]:
    """Run a bounded query and return its rows as tuples (tests, ``--print`` runs)."""
    result = t_env.execute_sql(query)
    with result.collect() as rows:
        return [tuple(row) for row in rows]


class JobError(PipelineError):
    """Flink rejected a statement or a job failed; the Java error is the cause."""


class JobCancelled(JobError):
    """The job was cancelled while the client waited for it: an expected end, not a failure.

    ``interrupted``: the cancel came from this process (ctrl-C / SIGINT while waiting), not from outside.
    """

    def __init__(self, message: str, *, job_id: str | None = None, interrupted: bool = False) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.interrupted = interrupted


JAVA_ERRORS = (Py4JError, JavaException)
"""What a call into Flink raises: py4j's own errors, or PyFlink's mapped ``TableException`` and kin."""


def register_table(t_env: TableEnvironment, name: str, ddl: str) -> None:
    """(Re)create a session-scoped table: jobs own their temporary tables, so a rebuild replaces them."""
    try:
        t_env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS `{name}`")
        t_env.execute_sql(ddl)
    except JAVA_ERRORS as exc:
        msg = f"cannot create table {name}: {_java_message(exc)}"
        raise JobError(msg) from exc


def register_view(t_env: TableEnvironment, name: str, query: str) -> None:
    """(Re)create a session-scoped view, e.g. a union that a window TVF then reads by name."""
    try:
        t_env.execute_sql(f"DROP TEMPORARY VIEW IF EXISTS `{name}`")
        t_env.execute_sql(f"CREATE TEMPORARY VIEW `{name}` AS {query}")
    except JAVA_ERRORS as exc:
        msg = f"cannot create view {name}: {_java_message(exc)}"
        raise JobError(msg) from exc


def insert_pipeline(t_env: TableEnvironment, query: str, sink: str) -> Any:
    """The ``INSERT INTO sink <query>`` pipeline (a PyFlink ``TablePipeline``), planned but not run."""
    try:
        return t_env.sql_query(query).insert_into(sink)
    except JAVA_ERRORS as exc:
        msg = f"cannot plan the job into {sink}: {_java_message(exc)}"
        raise JobError(msg) from exc


def execute(pipeline: Any, wait: bool = True) -> str | None:
    """Submit a pipeline (embedded mini-cluster, or the cluster under ``flink run``); return the job id.

    Waits for the job unless ``wait`` is false or the client is detached (``flink run --detached``,
    ``--detach``). Raises :class:`JobCancelled` when the job is cancelled while waited for, and
    :class:`JobError` when it fails.
    """
    try:
        with keep_root_log_level():
            result = pipeline.execute()
    except JAVA_ERRORS as exc:
        msg = f"job failed: {_java_message(exc)}"
        raise JobError(msg) from exc
    client = result.get_job_client()
    job_id = str(client.get_job_id()) if client is not None else None
    if not wait or _detached(pipeline):
        log.info("submitted job %s; not waiting for it (detached)", job_id)
        return job_id
    try:  # from here a ctrl-C cancels the job, even one that comes while this line is written
        log.info("submitted job %s; waiting for it to end", job_id)
        with keep_root_log_level(), _no_py4j_interrupt_trace():
            result.wait()
    except KeyboardInterrupt as exc:
        _cancel(client)
        msg = f"interrupted: cancelled job {job_id}"
        raise JobCancelled(msg, job_id=job_id, interrupted=True) from exc
    except JAVA_ERRORS as exc:
        if _was_cancelled(exc, client):
            msg = f"job {job_id} was cancelled"
            raise JobCancelled(msg, job_id=job_id) from exc
        msg = f"job failed: {_java_message(exc)}"
        raise JobError(msg) from exc
    return job_id


@contextlib.contextmanager
def keep_root_log_level() -> Iterator[None]:
    """Undo PyFlink lowering the root logger to WARNING (its Beam worker module does so when imported).

    Without this, every INFO line after the first job call (submitted, cancelled) would be dropped.
    """
    root = logging.getLogger()
    level = root.level
    try:
        yield
    finally:
        root.setLevel(level)


_PY4J_INTERRUPT = "KeyboardInterrupt while sending command."


@contextlib.contextmanager
def _no_py4j_interrupt_trace() -> Iterator[None]:
    """Drop py4j's ERROR + traceback for ctrl-C during a blocking call: here it is how a user stops a job."""

    def keep(record: logging.LogRecord) -> bool:
        return record.getMessage() != _PY4J_INTERRUPT

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def _detached(pipeline: Any) -> bool:
    """``execution.attached`` is false: ``flink run --detached`` set it, or :attr:`FlinkSettings.detach`."""
    t_env = getattr(pipeline, "_t_env", None)
    if t_env is None:
        return False
    return str(t_env.get_config().get("execution.attached", "true")).lower() == "false"


def _cancel(client: Any) -> None:
    """Cancel the job of ``client`` (best effort: the JVM may be going down with the same ctrl-C)."""
    if client is None:
        return
    try:
        client.cancel().result()
    except (*JAVA_ERRORS, OSError) as exc:
        log.warning("could not cancel the job: %s", exc)


def _was_cancelled(exc: BaseException, client: Any) -> bool:
    """The wait ended because the job was cancelled (the cause chain names it, or the job says so)."""
    if "JobCancellationException" in str(exc):
        return True
    if client is None:
        return False
    try:
        return str(client.get_job_status().result()) == "CANCELED"
    except (*JAVA_ERRORS, OSError):
        return False


def _java_message(exc: BaseException) -> str:
    """The innermost ``Caused by`` line of a Java error: the readable part of a long stack trace."""
    lines = [line for line in str(exc).splitlines() if "Exception:" in line or "Error:" in line]
    return lines[-1].strip() if lines else str(exc)[:500]
