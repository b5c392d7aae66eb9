"""The Dockerfile's flink target against the layout of the Flink distribution it builds on.

The apache-flink wheel in this environment carries the same distribution (lib/, opt/, plugins/) as the
``flink:<version>`` image, so it is the reference: a path under /opt/flink that the Dockerfile copies from
must exist there, or the build fails (as the old ``cp /opt/flink/opt/flink-metrics-prometheus-*.jar`` did).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
SPEC = importlib.util.find_spec("pyflink")
assert SPEC is not None and SPEC.submodule_search_locations, "apache-flink is not installed"
FLINK_HOME = Path(next(iter(SPEC.submodule_search_locations)))
FLINK_VERSION = re.search(r"^FROM flink:(\d+\.\d+\.\d+)-", DOCKERFILE, re.M)
SOURCE = re.compile(r"(?:\bcp|\bmv|\bln)\s+(?:-\w+\s+)*(/opt/flink/\S+)")


def _flink_stage() -> str:
    return DOCKERFILE.split(" AS flink\n", 1)[1]


def test_the_reference_distribution_is_the_images_version() -> None:
    assert FLINK_VERSION is not None
    assert (FLINK_HOME / "lib" / f"flink-dist-{FLINK_VERSION.group(1)}.jar").is_file()


def test_every_distribution_path_the_dockerfile_copies_from_exists() -> None:
    sources = SOURCE.findall(DOCKERFILE.replace("\\\n", " "))
    for source in sources:
        relative = source.removeprefix("/opt/flink/")
        assert list(FLINK_HOME.glob(relative)), f"{source} is not in the Flink {FLINK_VERSION} distribution"


def test_the_prometheus_reporter_comes_from_the_distributions_plugins_folder() -> None:
    assert FLINK_VERSION is not None
    shipped = FLINK_HOME / "plugins" / "metrics-prometheus" / f"flink-metrics-prometheus-{FLINK_VERSION.group(1)}.jar"
    assert shipped.is_file()
    assert not list((FLINK_HOME / "opt").glob("flink-metrics-prometheus-*.jar"))
    stage = _flink_stage()
    assert "flink-metrics-prometheus" not in stage.replace("# plugins/metrics-prometheus/flink-metrics-prometheus", "")
    assert "mkdir -p /opt/flink/plugins" not in stage


def test_the_python_driver_jar_the_operator_starts_is_in_the_distribution() -> None:
    k8s = (ROOT / "k8s" / "flink-common.yaml").read_text()
    (jar,) = re.findall(r"jarURI: local://(/opt/flink/\S+)", k8s)
    assert (FLINK_HOME / jar.removeprefix("/opt/flink/")).is_file(), jar
