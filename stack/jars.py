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
from pathlib import Path

from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)

POMS = Path(__file__).with_name("maven")
STAMP = ".pom.sha256"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"


def cache_root() -> Path:
    """Where jar folders are kept between runs."""
    return Path(os.environ.get("LLMPIPE_CACHE", Path.home() / ".cache" / "llmpipe"))


def jar_dir(name: str) -> Path:
    """Folder of jars for ``name`` (``kafka`` or ``flink``), fetched first if needed."""
    pom = POMS / name / "pom.xml"
    target = cache_root() / "jars" / name
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    stamp = target / STAMP
    if stamp.exists() and stamp.read_text().strip() == digest:
        return target
    _fetch(pom, target)
    stamp.write_text(digest)
    return target


def _fetch(pom: Path, target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        msg = "Maven (mvn) is needed once to fetch the jars; install it or fill the cache by hand"
        raise ConfigError(msg)
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
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
