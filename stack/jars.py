"""Fetch and cache the broker's and the Flink jobs' jars from Maven Central.

Jars live outside the repository (``$LLMPIPE_CACHE`` or ``~/.cache/llmpipe``) in one folder per POM,
tagged with the POM's hash: a second fetch with an unchanged POM is a no-op and downloads nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)

POMS = Path(__file__).with_name("maven")
STAMP = ".pom.sha256"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"


def cache_root() -> Path:
    """Where jar folders are kept between runs."""
    return Path(os.environ.get("LLMPIPE_CACHE", Path.home() / ".cache" / "llmpipe"))


def cached_by_pom(pom: Path, target: Path, make: Callable[[Path, Path], None],
                  complete: Callable[[Path], bool] = Path.exists) -> Path:
    """``target``, made from ``pom`` by ``make(pom, target)`` unless it was made from this very POM.

    The stamp file holds the POM's hash: an unchanged POM downloads and builds nothing, a changed one
    remakes the folder.
    """
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    stamp = target / STAMP
    if stamp.exists() and stamp.read_text().strip() == digest and complete(target):
        return target
    make(pom, target)
    stamp.write_text(digest)
    return target


def jar_dir(name: str) -> Path:
    """Folder of jars for ``name`` (``kafka``, ``flink`` or ``sql-client``), fetched first if needed."""
    return cached_by_pom(POMS / name / "pom.xml", cache_root() / "jars" / name, _fetch)


def maven(purpose: str) -> str:
    """The ``mvn`` executable; a one-line error naming ``purpose`` when Maven is not installed."""
    mvn = shutil.which("mvn")
    if mvn is None:
        msg = f"Maven (mvn) is needed once to {purpose}; install it or fill the cache by hand"
        raise ConfigError(msg)
    return mvn


def empty_staging(target: Path) -> Path:
    """``<target>.partial``, emptied: made there first, renamed to ``target`` only when complete."""
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    return staging


def _fetch(pom: Path, target: Path) -> None:
    mvn = maven("fetch the jars")
    staging = empty_staging(target)
    command = [mvn, "-q", "-B", "-f", str(pom), f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
               "-DexcludeArtifactIds=slf4j-api,jsr305" if pom.parent.name == "flink" else "-Dmdep.skip=false",
               DEPENDENCY_PLUGIN]
    log.info("fetching %s jars into %s", pom.parent.name, target)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        msg = f"mvn failed for {pom}:\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
        raise ConfigError(msg)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def flink_jar_urls() -> str:
    """``pipeline.jars`` value: ``;``-separated ``file://`` URLs of the Flink jobs' jars."""
    jars = sorted(jar_dir("flink").glob("*.jar"))
    return ";".join(jar.resolve().as_uri() for jar in jars)


def size_mib(name: str) -> float:
    """Size of one cached jar folder, for reports."""
    return sum(p.stat().st_size for p in jar_dir(name).glob("*.jar")) / 2**20
