"""k8s/ and docker-compose.yml through real validators, at the versions k8s/versions.yaml pins.

``kustomize build k8s/`` is piped through ``kubeconform -strict`` with schemas for the built-in kinds, the
Strimzi, Flink Kubernetes Operator and Prometheus Operator CRDs; docker-compose.yml is checked against the
Compose specification's JSON schema. The tools and schemas come from ``make deploy-tools``
(``python -m scripts.deploy_tools.fetch``); without them these tests fail, they do not skip.
Each check is also run on a deliberately broken copy, which must be rejected.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from scripts.deploy_tools import fetch

ROOT = Path(__file__).resolve().parents[3]
TOOLS = fetch.cache_dir()
Doc = dict[str, Any]
VAR = re.compile(r"\$(\$|\{(\w+)(?:(:?[-?])([^}]*))?\})")


@pytest.fixture(scope="module")
def tools() -> Path:
    if not fetch.complete(TOOLS):
        pytest.fail(f"the deployment validators are not fetched ({TOOLS}): run `make deploy-tools` "
                    "(python -m scripts.deploy_tools.fetch)")
    return TOOLS


@pytest.fixture(scope="module")
def rendered(tools: Path) -> list[Doc]:
    done = subprocess.run([str(tools / "bin" / "kustomize"), "build", str(ROOT / "k8s")], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _kubeconform(tools: Path, docs: list[Doc], tmp_path: Path) -> dict[str, Any]:
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    location = f"{tools / 'schemas'}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json"
    done = subprocess.run([str(tools / "bin" / "kubeconform"), "-strict", "-summary", "-output", "json",
                           "-schema-location", location, str(manifest)], capture_output=True, text=True, check=False)
    assert done.stdout, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    report["returncode"] = done.returncode
    return report


def test_every_rendered_resource_is_valid_for_the_pinned_versions(tools: Path, rendered: list[Doc],
                                                                   tmp_path: Path) -> None:
    report = _kubeconform(tools, rendered, tmp_path)
    assert report["summary"] == {"valid": len(rendered), "invalid": 0, "errors": 0, "skipped": 0}, report
    assert report["returncode"] == 0
    kinds = {d["kind"] for d in rendered}
    # One of each schema family: built-in, Strimzi, Flink operator, Prometheus operator.
    assert {"StatefulSet", "PersistentVolumeClaim", "Role", "Kafka", "KafkaNodePool", "KafkaTopic",
            "FlinkDeployment", "ServiceMonitor", "PodMonitor"} <= kinds


def _set(path: str, value: Any) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value
    return change


BROKEN: list[tuple[str, str, Callable[[Doc], None], str]] = [
    ("Kafka", "llmpipe", _set("spec.kafka.listner", []), "additional properties 'listner' not allowed"),
    ("KafkaTopic", "llm.raw", _set("apiVersion", "kafka.strimzi.io/v1beta2"), "could not find schema"),
    ("KafkaNodePool", "dual-role", _set("spec.roles", ["leader"]), "/spec/roles/0"),
    ("FlinkDeployment", "ab-arm", _set("spec.flinkVersion", "v2_9"), "/spec/flinkVersion"),
    ("FlinkDeployment", "user-risk", _set("spec.job.upgradeMode", "last_state"), "/spec/job/upgradeMode"),
    ("StatefulSet", "connector", _set("spec.template.spec.containers.0.imagee", "x"),
     "additional properties 'imagee' not allowed"),
    ("PersistentVolumeClaim", "flink-state", _set("spec.accessModes", "ReadWriteMany"), "/spec/accessModes"),
    ("ServiceMonitor", "connector", _set("spec.endpoints.0.prot", "metrics"), "additional properties 'prot'"),
    ("PodMonitor", "flink", _set("spec.podMetricsEndpoints", {"port": "metrics"}), "/spec/podMetricsEndpoints"),
]


def test_broken_copies_are_rejected_one_by_one(tools: Path, rendered: list[Doc], tmp_path: Path) -> None:
    docs = copy.deepcopy(rendered)
    for kind, name, change, _ in BROKEN:
        (target,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
        change(target)
    report = _kubeconform(tools, docs, tmp_path)
    assert report["returncode"] != 0
    found = {(r["kind"], r["name"]): r for r in report["resources"]}
    for kind, name, _, message in BROKEN:
        result = found.get((kind, name))
        assert result is not None and result["status"] in {"statusInvalid", "statusError"}, (kind, name, result)
        assert message in result["msg"] + json.dumps(result.get("validationErrors")), (kind, name, result)
    assert report["summary"]["valid"] == len(rendered) - len(BROKEN)


def _interpolated(node: Any) -> Any:
    """docker-compose.yml as Compose reads it with no variables set: ``${NAME:-default}`` is its default."""
    if isinstance(node, dict):
        return {k: _interpolated(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolated(v) for v in node]
    if isinstance(node, str):
        return VAR.sub(lambda m: "$" if m.group(1) == "$" else (m.group(4) or ""), node)
    return node


@pytest.fixture(scope="module")
def compose_schema(tools: Path) -> jsonschema.protocols.Validator:
    schema = json.loads((tools / "compose-spec.json").read_text())
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator: jsonschema.protocols.Validator = validator_class(schema)
    return validator


def _compose() -> Doc:
    doc: Doc = _interpolated(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))
    return doc


def test_docker_compose_is_valid_for_the_compose_specification(compose_schema: jsonschema.protocols.Validator
                                                              ) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in compose_schema.iter_errors(_compose())]
    assert errors == []


@pytest.mark.parametrize(("where", "change"), [
    ("services/flink-submitter", lambda c: c["services"]["flink-submitter"].update(restart_policy="on-failure")),
    ("services/zookeeper/depends_on", lambda c: c["services"]["zookeeper"].update(depends_on=3)),
    ("volumes/flink-data", lambda c: c["volumes"].update({"flink-data": {"drivers": "local"}})),
])
def test_a_broken_compose_file_is_rejected(compose_schema: jsonschema.protocols.Validator, where: str,
                                           change: Callable[[Doc], None]) -> None:
    broken = _compose()
    change(broken)
    errors = list(compose_schema.iter_errors(broken))
    assert errors, where
    assert any("/".join(map(str, e.absolute_path)).startswith(where) for e in errors), [e.message for e in errors]


def test_a_second_fetch_downloads_nothing(tools: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    def no_commands(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr(subprocess, "run", no_commands)
    assert fetch.main([]) == 0
    assert capsys.readouterr().out.strip() == str(tools)
