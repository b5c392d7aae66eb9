"""Deploy the feature jobs to a Flink session cluster, idempotently; stop them with a savepoint to upgrade.

Usage::

    python -m jobs.submit --rest-url http://jobmanager:8081 [--savepoint PATH] [--flink PATH]
                          JOB [JOB ...] [-- <options passed to each job>]
    python -m jobs.submit --rest-url URL stop --savepoint-dir DIR JOB [JOB ...]

``JOB`` is ``model_minute``, ``user_risk`` or ``ab_arm`` (``run`` may precede them). Each job runs under the
name ``llmpipe.<job>`` (``pipeline.name``). For every job, the cluster's ``GET /jobs/overview`` decides:
a job of that name that is RUNNING, CREATED, INITIALIZING or RESTARTING is left alone (one log line);
otherwise ``flink run --detached -m host:port -pym jobs.<job> -pyfs <packages> [-s savepoint] -- <options>``
submits it, and the command waits until the cluster lists it as RUNNING. So a restarted deployment
(compose, an init container) submits what is missing and never a second copy.

``stop`` stops each running job with a savepoint (``POST /jobs/<id>/stop`` with ``targetDirectory``), waits
for it and prints ``<job> <savepoint path>``; resubmit with ``--savepoint PATH`` to continue from that state
(open windows included). Upgrade = ``stop``, deploy the new code, ``run --savepoint``.

The ``flink`` CLI plans each job on the submitting machine, so it needs the connector jars there too: run
it from a distribution whose ``lib/`` has them (the cluster's image, or ``FLINK_LIB_DIR`` pointing at such a
folder, as ``stack.flink`` makes) and pass ``--no-jars`` to the jobs; otherwise leave ``--no-jars`` out and
each job ships the local jar cache (``pipeline.jars``).

Exit status: 0 when every job is running (or, for ``stop``, stopped with a savepoint), 1 when one is not,
2 for a bad option (one line naming it, before anything is submitted).

Only the standard library and ``llmpipe``'s settings are used here: the machine that submits may have only
``apache-flink`` and this repository installed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmpipe.errors import ConfigError, PipelineError
from llmpipe.runtime import configure_logging
from llmpipe.settings import Checked, Refused, env_option, non_empty, parse_args, positive_int

log = logging.getLogger(__name__)

JOBS = ("model_minute", "user_risk", "ab_arm")
NAME_PREFIX = "llmpipe."
ACTIVE = frozenset({"RUNNING", "CREATED", "INITIALIZING", "RESTARTING"})
"""Job states in which the job exists on the cluster and will (again) run: submitting another would double it."""
FAILED = frozenset({"FAILED", "FAILING", "CANCELED", "CANCELLING", "SUSPENDED"})
PACKAGES = ("jobs", "llmpipe", "stack")
"""What a job module imports, shipped with ``-pyfs`` so the client needs no installed copy."""


def job_name(job: str) -> str:
    """The ``pipeline.name`` a job runs under (see ``jobs.cli``)."""
    return f"{NAME_PREFIX}{job}"


def _rest_url(text: str) -> str:
    parts = urllib.parse.urlsplit(text.strip())
    if parts.scheme not in {"http", "https"} or not parts.hostname or parts.path not in {"", "/"}:
        msg = "not http(s)://host[:port]"
        raise ValueError(msg)
    parts.port  # noqa: B018 (raises ValueError for a port that is not a number in range)
    return f"{parts.scheme}://{parts.netloc}"


rest_url = Checked("an http(s)://host:port URL of the JobManager's REST API", _rest_url)


def _job(text: str) -> str:
    if text not in JOBS:
        msg = "unknown job"
        raise ValueError(msg)
    return text


class _Parser(argparse.ArgumentParser):
    """Options may come before, between or after the words (``stop --savepoint-dir D model_minute``)."""

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        return self.parse_intermixed_args(args, namespace)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m jobs.submit", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("words", nargs="+", metavar="[run|stop] JOB",
                   help=f"optional action (run, the default, or stop) then jobs: {', '.join(JOBS)}")
    env_option(p, "--rest-url", "JOBS_REST_URL", type=rest_url, help="the JobManager's REST API, http://host:port")
    p.add_argument("-s", "--savepoint", help="run: start the (single) job from this savepoint or retained checkpoint")
    env_option(p, "--savepoint-dir", "JOBS_SAVEPOINT_DIR", type=non_empty,
               help="stop: where the cluster writes the savepoints (a path the JobManager can write)")
    p.add_argument("--drain", action="store_true",
                   help="stop: emit the end-of-time watermark first, closing every open window (no upgrade "
                   "resumes them)")
    env_option(p, "--flink", "JOBS_FLINK_CLI", type=non_empty,
               help="the flink CLI (default: $FLINK_HOME/bin/flink, flink on PATH, else the PyFlink wheel's)")
    env_option(p, "--python", "JOBS_CLIENT_PYTHON", type=non_empty,
               help="python that runs each job's client (-pyclientexec; needs apache-flink and these packages; "
               "default: the one running this command)")
    env_option(p, "--pyfs", "JOBS_PYFS", type=non_empty,
               help=f"folder or zip with the packages to ship (-pyfs; default: a copy of {', '.join(PACKAGES)})")
    env_option(p, "--timeout", "JOBS_SUBMIT_TIMEOUT_S", default=180, type=positive_int,
               help="seconds to wait for each submission, RUNNING state or savepoint (>= 1)")
    return p


@dataclass(frozen=True)
class Request:
    """One validated invocation."""

    action: str
    jobs: tuple[str, ...]
    rest_url: str
    job_args: tuple[str, ...] = ()
    savepoint: str | None = None
    savepoint_dir: str | None = None
    drain: bool = False
    flink: str = "flink"
    python: str = sys.executable
    pyfs: str | None = None
    timeout_s: float = 180.0

    @property
    def address(self) -> str:
        """``host:port`` for ``flink run -m``."""
        parts = urllib.parse.urlsplit(self.rest_url)
        return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Our arguments and the jobs' (everything after the first ``--``)."""
    if "--" in argv:
        cut = list(argv).index("--")
        return list(argv[:cut]), list(argv[cut + 1:])
    return list(argv), []


def request_from_args(argv: Sequence[str]) -> Request:
    """Parse and check every option now; :class:`ConfigError` (one line naming the option) if one is wrong."""
    ours, job_args = _split(argv)
    args = parse_args(_parser(), ours)
    action, words = ("run", args.words)
    if args.words[0] in {"run", "stop"}:
        action, words = args.words[0], args.words[1:]
    if not words:
        msg = f"JOB: name at least one of {', '.join(JOBS)}"
        raise ConfigError(msg)
    try:
        jobs = tuple(dict.fromkeys(_job(word) for word in words))
    except ValueError as exc:
        bad = next(word for word in words if word not in JOBS)
        msg = f"JOB must be one of {', '.join(JOBS)}, not {bad!r}"
        raise ConfigError(msg) from exc
    if not args.rest_url:
        msg = "--rest-url (or JOBS_REST_URL) is required: the JobManager's REST API, http://host:port"
        raise ConfigError(msg)
    if action == "stop":
        _check_stop(args, job_args)
    else:
        _check_run(args, jobs)
    return Request(action=action, jobs=jobs, rest_url=args.rest_url, job_args=tuple(job_args),
                   savepoint=args.savepoint, savepoint_dir=args.savepoint_dir, drain=args.drain,
                   flink=_flink_cli(args.flink) if action == "run" else "flink",
                   python=args.python or sys.executable, pyfs=args.pyfs, timeout_s=float(args.timeout))


def _check_stop(args: argparse.Namespace, job_args: list[str]) -> None:
    if not args.savepoint_dir:
        msg = "--savepoint-dir (or JOBS_SAVEPOINT_DIR) is required with stop"
        raise ConfigError(msg)
    if args.savepoint:
        msg = "--savepoint is for run, not stop (stop writes savepoints into --savepoint-dir)"
        raise ConfigError(msg)
    if job_args:
        msg = "job options after -- are for run, not stop"
        raise ConfigError(msg)


def _check_run(args: argparse.Namespace, jobs: tuple[str, ...]) -> None:
    if args.drain:
        msg = "--drain is for stop, not run"
        raise ConfigError(msg)
    if args.savepoint is not None:
        if len(jobs) != 1:
            msg = "--savepoint: a savepoint belongs to one job; name exactly one JOB"
            raise ConfigError(msg)
        local = _local_path(args.savepoint)
        if local is not None and not local.exists():
            msg = f"--savepoint {args.savepoint}: no such file or folder"
            raise ConfigError(msg)
    if args.pyfs is not None and not Path(args.pyfs).exists():
        msg = f"--pyfs {args.pyfs}: no such file or folder"
        raise ConfigError(msg)
    if args.python is not None and shutil.which(args.python) is None:
        msg = f"--python {args.python}: not an executable"
        raise ConfigError(msg)


def _local_path(location: str) -> Path | None:
    """The local path of a savepoint location (plain or ``file:``), None for other file systems."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme in {"", "file"}:
        return Path(urllib.parse.unquote(parts.path))
    return None


def _flink_cli(given: str | None) -> str:
    """The ``flink`` executable: as given, else ``$FLINK_HOME/bin/flink``, ``flink`` on PATH, the wheel's."""
    if given:
        found = shutil.which(given)
        if found is None:
            msg = f"--flink {given}: not an executable"
            raise ConfigError(msg)
        return found
    home = os.environ.get("FLINK_HOME")
    candidates = [str(Path(home) / "bin" / "flink")] if home else []
    candidates.append("flink")
    for candidate in candidates:
        found = shutil.which(candidate)
        if found is not None:
            return found
    from stack.flink import flink_cli  # the wheel's distribution; imports nothing beyond the standard library

    return str(flink_cli())


class Cluster:
    """The few REST calls deployment needs, over ``urllib`` (no client library on the submitting machine)."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            msg = f"{method} {self.url}{path}: HTTP {exc.code}: {detail}"
            raise PipelineError(msg) from exc
        except (OSError, ValueError) as exc:
            msg = f"{method} {self.url}{path}: {exc}"
            raise PipelineError(msg) from exc

    def jobs(self) -> list[dict[str, Any]]:
        """``GET /jobs/overview``: every job the cluster knows (id ``jid``, ``name``, ``state``)."""
        found: list[dict[str, Any]] = self._call("GET", "/jobs/overview").get("jobs", [])
        return found

    def active(self, name: str) -> dict[str, Any] | None:
        """The job called ``name`` that exists and will run (see :data:`ACTIVE`), if any."""
        return next((job for job in self.jobs() if job.get("name") == name and job.get("state") in ACTIVE), None)

    def stop_with_savepoint(self, job_id: str, target: str, *, drain: bool = False) -> str:
        """``POST /jobs/<id>/stop``; the trigger id of the savepoint operation."""
        answer = self._call("POST", f"/jobs/{job_id}/stop", {"targetDirectory": target, "drain": drain})
        return str(answer["request-id"])

    def savepoint_status(self, job_id: str, trigger: str) -> tuple[str, dict[str, Any]]:
        """(``IN_PROGRESS`` | ``COMPLETED``, operation) of a savepoint trigger."""
        answer = self._call("GET", f"/jobs/{job_id}/savepoints/{trigger}")
        return str(answer["status"]["id"]), answer.get("operation") or {}

    def state(self, job_id: str) -> str:
        """``GET /jobs/<id>``: the job's state."""
        return str(self._call("GET", f"/jobs/{job_id}")["state"])


def _until(condition: Any, timeout_s: float, what: str, interval_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            msg = f"timed out after {timeout_s:.0f}s waiting for {what}"
            raise PipelineError(msg)
        time.sleep(interval_s)


def stage_packages(target: Path) -> Path:
    """A folder holding copies of :data:`PACKAGES` (no caches), for ``-pyfs``."""
    source = Path(__file__).resolve().parent.parent
    for package in PACKAGES:
        shutil.copytree(source / package, target / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    return target


def run_jobs(request: Request, cluster: Cluster) -> bool:
    """Submit every job not active on the cluster; True when all are running."""
    with tempfile.TemporaryDirectory(prefix="llmpipe-pyfs-") as staging:
        pyfs = request.pyfs or str(stage_packages(Path(staging)))
        return all([_run_one(request, cluster, job, pyfs) for job in request.jobs])


def _run_one(request: Request, cluster: Cluster, job: str, pyfs: str) -> bool:
    name = job_name(job)
    existing = cluster.active(name)
    if existing is not None:
        log.info("%s is already on the cluster as job %s (%s): not submitting it again",
                 name, existing["jid"], existing["state"])
        return True
    command = [request.flink, "run", "--detached", "-m", request.address, "-pyclientexec", request.python,
               "-pym", f"jobs.{job}", "-pyfs", pyfs]
    if request.savepoint:
        command += ["-s", request.savepoint]
    command += ["--", *request.job_args]
    known = {str(job["jid"]) for job in cluster.jobs()}
    log.info("submitting %s%s", name, f" from {request.savepoint}" if request.savepoint else "")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=request.timeout_s, check=False)
    except subprocess.TimeoutExpired:
        log.error("%s: flink run did not return within %.0fs", name, request.timeout_s)
        return False
    if done.returncode != 0:
        log.error("%s: flink run exited with %d:\n%s", name, done.returncode, _tail(done.stdout + done.stderr))
        return False
    try:
        job_id = _until(lambda: _running(cluster, name, known), request.timeout_s, f"{name} to be RUNNING")
    except PipelineError as exc:
        log.error("%s: submitted, but %s", name, exc)
        return False
    log.info("%s is running as job %s", name, job_id)
    return True


def _running(cluster: Cluster, name: str, known: set[str]) -> str | None:
    """The id of the new job called ``name`` once RUNNING; ``PipelineError`` when it failed.

    ``known``: ids the cluster listed before this submission (an earlier run's CANCELED or FINISHED job of
    the same name is not this one).
    """
    jobs = [job for job in cluster.jobs() if job.get("name") == name and str(job.get("jid")) not in known]
    jobs.sort(key=lambda job: job.get("start-time", 0))
    if not jobs:
        return None
    newest = jobs[-1]
    if newest.get("state") in FAILED:
        msg = f"job {newest['jid']} is {newest['state']}"
        raise PipelineError(msg)
    return str(newest["jid"]) if newest.get("state") == "RUNNING" else None


def stop_jobs(request: Request, cluster: Cluster) -> bool:
    """Stop every named job with a savepoint; print ``<job> <savepoint>``; True when all were stopped."""
    ok = True
    for job in request.jobs:
        location = _stop_one(request, cluster, job)
        if location is None:
            ok = False
        else:
            sys.stdout.write(f"{job} {location}\n")
            sys.stdout.flush()
    return ok


def _stop_one(request: Request, cluster: Cluster, job: str) -> str | None:
    name = job_name(job)
    existing = cluster.active(name)
    if existing is None or existing["state"] != "RUNNING":
        log.error("%s is not running on the cluster%s: no savepoint taken", name,
                  f" ({existing['state']})" if existing else "")
        return None
    job_id = str(existing["jid"])
    target = request.savepoint_dir or ""
    log.info("stopping %s (job %s) with a savepoint into %s", name, job_id, target)
    try:
        trigger = cluster.stop_with_savepoint(job_id, target, drain=request.drain)
        status, operation = _until(lambda: _savepoint_done(cluster, job_id, trigger), request.timeout_s,
                                   f"the savepoint of {name}")
    except PipelineError as exc:
        log.error("%s: %s", name, exc)
        return None
    del status
    if "location" not in operation:
        cause = (operation.get("failure-cause") or {}).get("serialized-throwable") or operation
        log.error("%s: the savepoint failed: %s", name, str(cause)[:1000])
        return None
    location = str(operation["location"])
    log.info("%s stopped; savepoint %s", name, location)
    return location


def _savepoint_done(cluster: Cluster, job_id: str, trigger: str) -> tuple[str, dict[str, Any]] | None:
    status, operation = cluster.savepoint_status(job_id, trigger)
    return (status, operation) if status == "COMPLETED" else None


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jobs.submit``: 0 all done, 1 a job is not running (or not stopped), 2 a bad option."""
    configure_logging("INFO")
    try:
        request = request_from_args(sys.argv[1:] if argv is None else argv)
    except (ConfigError, Refused) as exc:
        sys.stderr.write(f"jobs.submit: {exc}\n")
        return 2
    cluster = Cluster(request.rest_url)
    try:
        done = stop_jobs(request, cluster) if request.action == "stop" else run_jobs(request, cluster)
    except PipelineError as exc:
        log.error("jobs.submit: %s", exc)
        return 1
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
