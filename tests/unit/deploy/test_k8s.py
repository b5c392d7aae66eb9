"""k8s/ checked offline: the kustomization renders, and every object has what the product needs.

``kubectl kustomize`` renders the tree where kubectl exists (else the resources are read as listed).
kubeconform validates the built-in kinds when it is installed and a schema location is configured
(``KUBECONFORM_SCHEMA_LOCATION``; CRD schemas are not reachable offline), so the custom resources
(Strimzi, Flink operator, Prometheus operator) are checked structurally here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "k8s"
Doc = dict[str, Any]


def _render() -> str:
    if shutil.which("kubectl"):
        done = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    return "\n---\n".join((K8S / name).read_text() for name in listed)


RENDERED = _render()
DOCS: list[Doc] = [d for d in yaml.safe_load_all(RENDERED) if d]


def _kind(kind: str) -> list[Doc]:
    return [d for d in DOCS if d["kind"] == kind]


def _one(kind: str, name: str) -> Doc:
    found = [d for d in _kind(kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def _pod_specs() -> list[tuple[str, Doc]]:
    out = [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in DOCS
           if d["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}]
    out += [(d["metadata"]["name"], d["spec"]["podTemplate"]["spec"]) for d in _kind("FlinkDeployment")]
    return out


@pytest.mark.skipif(not (shutil.which("kubeconform") and os.environ.get("KUBECONFORM_SCHEMA_LOCATION")),
                    reason="kubeconform or its schemas not available offline; structural checks run")
def test_kubeconform_builtin_kinds(tmp_path: Path) -> None:
    rendered = tmp_path / "all.yaml"
    rendered.write_text(RENDERED)
    done = subprocess.run(["kubeconform", "-strict", "-ignore-missing-schemas", "-summary",
                           "-schema-location", os.environ["KUBECONFORM_SCHEMA_LOCATION"], str(rendered)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_object_is_in_the_namespace_and_labelled() -> None:
    for doc in DOCS:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == "llmpipe" or not shutil.which("kubectl"), doc["metadata"]
        assert doc["apiVersion"] and doc["metadata"]["name"]


def test_strimzi_kafka_in_kraft_with_a_node_pool_and_topics() -> None:
    kafka = _one("Kafka", "llmpipe")
    assert kafka["apiVersion"] == "kafka.strimzi.io/v1beta2"
    assert kafka["metadata"]["annotations"] == {"strimzi.io/node-pools": "enabled", "strimzi.io/kraft": "enabled"}
    assert "zookeeper" not in kafka["spec"]
    assert kafka["spec"]["kafka"]["listeners"] and kafka["spec"]["entityOperator"]["topicOperator"] is not None
    pools = _kind("KafkaNodePool")
    assert pools and all(p["metadata"]["labels"]["strimzi.io/cluster"] == "llmpipe" for p in pools)
    roles = {r for p in pools for r in p["spec"]["roles"]}
    assert {"controller", "broker"} <= roles
    topics = {t["metadata"]["name"]: t for t in _kind("KafkaTopic")}
    assert {"llm.requests", "llm.raw", "llm.dlq", "llm.features"} <= set(topics)
    for topic in topics.values():
        assert topic["metadata"]["labels"]["strimzi.io/cluster"] == "llmpipe"
        assert topic["spec"]["partitions"] >= 1 and topic["spec"]["replicas"] >= 1


def test_vllm_and_gpu_stage_share_one_gpu_node() -> None:
    pod = _one("StatefulSet", "inference")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"vllm", "gpu-stage"}
    assert containers["vllm"]["image"].startswith("vllm/vllm-openai:")
    for c in containers.values():
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e for e in containers["gpu-stage"]["env"]}
    assert env["GPU_STAGE_TRANSACTIONAL_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert any(a.startswith("--gpu-memory-utilization=") for a in containers["vllm"]["args"])
    assert pod["nodeSelector"]["llmpipe.io/gpus-per-node"] == "1"
    config = _one("ConfigMap", "llmpipe")["data"]
    assert config["GPU_STAGE_BACKEND"] == "gpu" and int(config["GPU_STAGE_GPU_POOL_BYTES"]) > 0
    slicing = yaml.safe_load(yaml.safe_load((K8S / "gpu-sharing" / "time-slicing-config.yaml").read_text())
                             ["data"]["any"])
    assert slicing["sharing"]["timeSlicing"]["resources"][0]["replicas"] >= len(containers)


def test_flink_jobs_run_on_the_operator() -> None:
    deployments = {d["metadata"]["name"]: d for d in _kind("FlinkDeployment")}
    assert {"model-minute", "user-risk", "ab-arm"} <= set(deployments)
    for name, d in deployments.items():
        assert d["apiVersion"] == "flink.apache.org/v1beta1"
        job = d["spec"]["job"]
        assert job["entryClass"] == "org.apache.flink.client.python.PythonDriver"
        assert job["jarURI"].startswith("local:///opt/flink/opt/flink-python-")
        assert job["args"][:2] == ["-pym", f"jobs.{name.replace('-', '_')}"] and "--no-jars" in job["args"]
        assert d["spec"]["serviceAccount"] in {s["metadata"]["name"] for s in _kind("ServiceAccount")}
        assert d["spec"]["podTemplate"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"


def test_pods_are_non_root_read_only_and_bounded() -> None:
    for name, spec in _pod_specs():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert sc["capabilities"]["drop"] == ["ALL"], (name, c["name"])
            if c["name"] != "flink-main-container":  # the operator sizes it from jobManager/taskManager
                assert {"cpu", "memory"} <= set(c["resources"]["requests"]), (name, c["name"])
                assert {"cpu", "memory"} <= set(c["resources"]["limits"]), (name, c["name"])
            assert any(m["mountPath"] == "/tmp" for m in c.get("volumeMounts", [])), (name, c["name"])


def test_services_and_monitors_select_real_pods() -> None:
    pod_labels = [d["spec"]["template"]["metadata"]["labels"] for d in _kind("StatefulSet")]
    services = _kind("Service")
    for svc in services:
        selector = svc["spec"]["selector"]
        assert any(selector.items() <= labels.items() for labels in pod_labels), svc["metadata"]["name"]
    for monitor in _kind("ServiceMonitor"):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        matching = [s for s in services if wanted.items() <= s["metadata"].get("labels", {}).items()]
        assert matching, monitor["metadata"]["name"]
        ports = {p["name"] for s in matching for p in s["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    scraped = {p["name"] for s in services for p in s["spec"]["ports"] if p["name"] in {"metrics", "http"}}
    assert {"metrics", "http"} <= scraped
