"""k8s/ checked structurally: the kustomization renders, and every object has what the product needs.

The pinned kustomize (``make deploy-tools``) renders the tree, else ``kubectl kustomize``. Schema validation
of every resource (built-in kinds and the operators' CRDs, at the versions k8s/versions.yaml pins) is in
test_validators.py; here are the product's own rules: versions, durable Flink state and HA, RBAC, GPU
sharing, non-root/read-only pods, resources, and that every Service and monitor selects real pods.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import yaml

from scripts.deploy_tools import fetch

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "k8s"
VERSIONS = fetch.versions()
FLINK_HOME = Path(next(iter(importlib.util.find_spec("pyflink").submodule_search_locations)))  # type: ignore[union-attr]
"""The apache-flink wheel lays out the Flink distribution the image runs (lib/, opt/, plugins/)."""
Doc = dict[str, Any]


def _render() -> str:
    kustomize = fetch.cache_dir() / "bin" / "kustomize"
    if fetch.complete(fetch.cache_dir()):
        command = [str(kustomize), "build", str(K8S)]
    elif shutil.which("kubectl"):
        command = ["kubectl", "kustomize", str(K8S)]
    else:
        msg = "neither the pinned kustomize (make deploy-tools) nor kubectl is available to render k8s/"
        raise RuntimeError(msg)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


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


def test_every_object_is_in_the_namespace_and_labelled() -> None:
    for doc in DOCS:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == "llmpipe", doc["metadata"]
            assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "llmpipe", doc["metadata"]
        assert doc["apiVersion"] and doc["metadata"]["name"]


def test_the_operator_versions_are_pinned_and_documented() -> None:
    operators = VERSIONS["operators"]
    readme = (K8S / "README.md").read_text()
    for name, version in operators.items():
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", str(version)), (name, version)
    # The exact install commands name the pinned versions.
    assert f"--version {operators['strimzi']}" in readme
    assert f"flink-kubernetes-operator-{operators['flinkKubernetesOperator']}/" in readme
    assert f"--version {operators['flinkKubernetesOperator']}" in readme
    assert f"prometheus-operator/releases/download/{operators['prometheusOperator']}/" in readme


def test_strimzi_kafka_in_kraft_with_a_node_pool_and_topics() -> None:
    kafka = _one("Kafka", "llmpipe")
    # Strimzi 1.x serves kafka.strimzi.io/v1 only; v1beta2 objects are refused.
    assert {d["apiVersion"] for d in DOCS if d["apiVersion"].startswith("kafka.strimzi.io/")} == {"kafka.strimzi.io/v1"}
    assert kafka["spec"]["kafka"]["version"] == VERSIONS["kafka"]["version"]
    assert kafka["spec"]["kafka"]["metadataVersion"] == VERSIONS["kafka"]["metadataVersion"]
    assert kafka["spec"]["kafka"]["metadataVersion"].startswith(VERSIONS["kafka"]["version"].rsplit(".", 1)[0] + "-")
    assert "zookeeper" not in kafka["spec"] and "annotations" not in kafka["metadata"]
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
    assert set(deployments) == {"model-minute", "user-risk", "ab-arm"}
    for name, d in deployments.items():
        assert d["apiVersion"] == "flink.apache.org/v1beta1"
        assert d["spec"]["flinkVersion"] == VERSIONS["flink"]["flinkVersion"]
        assert d["spec"]["image"].startswith("ghcr.io/llmpipe/llmpipe-flink:")
        job = d["spec"]["job"]
        assert job["entryClass"] == "org.apache.flink.client.python.PythonDriver"
        assert job["jarURI"] == f"local:///opt/flink/opt/flink-python-{VERSIONS['flink']['version']}.jar"
        assert job["args"][:2] == ["-pym", f"jobs.{name.replace('-', '_')}"] and "--no-jars" in job["args"]
        assert d["spec"]["serviceAccount"] in {s["metadata"]["name"] for s in _kind("ServiceAccount")}
        assert d["spec"]["podTemplate"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"


def _flink_dist_keys() -> bytes:
    """The configuration classes of the Flink distribution the image runs (the apache-flink wheel's copy)."""
    (dist,) = (FLINK_HOME / "lib").glob(f"flink-dist-{VERSIONS['flink']['version']}.jar")
    with zipfile.ZipFile(dist) as jar:
        return b"".join(jar.read(n) for n in jar.namelist() if n.startswith("org/apache/flink/configuration/"))


def test_flink_state_is_durable_and_highly_available() -> None:
    claims = {c["metadata"]["name"]: c for c in _kind("PersistentVolumeClaim")}
    known_keys = _flink_dist_keys()
    dirs = set()
    for d in _kind("FlinkDeployment"):
        name, spec = d["metadata"]["name"], d["spec"]
        conf = spec["flinkConfiguration"]
        for key in conf:  # Flink 2.x names only (state.checkpoints.dir and friends are gone)
            assert key.startswith("metrics.reporter.") or key.encode() in known_keys, (name, key)
        for key in ("execution.checkpointing.dir", "execution.checkpointing.savepoint-dir",
                    "high-availability.storageDir"):
            assert conf[key].startswith(f"file:///flink-data/{name}/"), (name, key)
            dirs.add(conf[key])
        assert conf["high-availability.type"] == "kubernetes"
        assert int(conf["execution.checkpointing.num-retained"]) >= 2
        assert conf["execution.checkpointing.externalized-checkpoint-retention"] == "RETAIN_ON_CANCELLATION"
        assert spec["job"]["upgradeMode"] in {"last-state", "savepoint"}
        pod = spec["podTemplate"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        (main,) = [c for c in pod["containers"] if c["name"] == "flink-main-container"]
        (mount,) = [m for m in main["volumeMounts"] if m["mountPath"] == "/flink-data"]
        claim = volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]
        assert claims[claim]["spec"]["accessModes"] == ["ReadWriteMany"], claim
        assert "emptyDir" not in volumes[mount["name"]]
    assert len(dirs) == 9  # no two jobs share a state folder


def test_flink_rbac_allows_native_mode_and_kubernetes_ha() -> None:
    (role,) = _kind("Role")
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    ha = {"get", "list", "watch", "create", "update", "patch", "delete"}
    assert ha <= granted[("", "configmaps")]
    assert ha <= granted[("coordination.k8s.io", "leases")]
    assert {"get", "list", "watch", "create", "delete"} <= granted[("", "pods")]
    binding = _one("RoleBinding", "flink")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert {"kind": "ServiceAccount", "name": "flink", "namespace": "llmpipe"} in binding["subjects"]


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
    for monitor in _kind("PodMonitor"):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        if monitor["metadata"]["name"] == "flink":
            for d in _kind("FlinkDeployment"):
                template = d["spec"]["podTemplate"]
                assert wanted.items() <= template["metadata"]["labels"].items()
                ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
                assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= ports
    for monitor in _kind("ServiceMonitor"):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        matching = [s for s in services if wanted.items() <= s["metadata"].get("labels", {}).items()]
        assert matching, monitor["metadata"]["name"]
        ports = {p["name"] for s in matching for p in s["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    scraped = {p["name"] for s in services for p in s["spec"]["ports"] if p["name"] in {"metrics", "http"}}
    assert {"metrics", "http"} <= scraped
