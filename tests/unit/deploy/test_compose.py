"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

test_validators.py validates the file against the Compose specification's schema; here a structural check
reads the YAML and enforces what the product needs: the services, the ``gpu`` profile, healthchecks,
``depends_on`` conditions, one shared GPU, pinned images, a Prometheus target for every metrics endpoint,
durable Flink state with ZooKeeper HA, an idempotent job submitter, and one transactional id per replica.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
PROMETHEUS = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
ONE_SHOT = {"kafka-init", "flink-submitter"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def _resolved(text: str) -> str:
    """Substitute ``${NAME:-default}`` with its default, as Compose does when NAME is unset."""
    return VAR.sub(lambda m: m.group(2) or "", text)


def test_the_parts_are_there() -> None:
    want = {"kafka", "kafka-init", "vllm-sim", "vllm", "connector", "gpu-stage", "gpu-stage-gpu",
            "flink-jobmanager", "flink-taskmanager", "flink-submitter", "zookeeper", "prometheus"}
    assert want <= set(SERVICES)
    assert _resolved(SERVICES["kafka"]["image"]).startswith("apache/kafka:")
    assert SERVICES["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft
    assert _resolved(SERVICES["vllm"]["image"]).startswith("vllm/vllm-openai:")


def test_gpu_profile_holds_real_vllm_and_the_gpu_stage_sharing_one_card() -> None:
    assert SERVICES["vllm"]["profiles"] == ["gpu"]
    assert SERVICES["gpu-stage-gpu"]["profiles"] == ["gpu"]
    assert "profiles" not in SERVICES["vllm-sim"] and "profiles" not in SERVICES["gpu-stage"]
    devices = [SERVICES[s]["deploy"]["resources"]["reservations"]["devices"][0] for s in ("vllm", "gpu-stage-gpu")]
    assert all(d["capabilities"] == ["gpu"] and d["driver"] == "nvidia" for d in devices)
    assert devices[0]["device_ids"] == devices[1]["device_ids"]
    assert SERVICES["gpu-stage-gpu"]["environment"]["GPU_STAGE_BACKEND"] == "gpu"
    assert SERVICES["gpu-stage"]["environment"]["GPU_STAGE_BACKEND"] == "cpu"
    vllm_command = SERVICES["vllm"]["command"]
    for flag in ("--model", "--gpu-memory-utilization", "VLLM_MODEL", "VLLM_STRUCTURED_OUTPUT_ARGS"):
        assert flag in vllm_command


def test_healthchecks_and_depends_on_conditions() -> None:
    for name, service in SERVICES.items():
        if name not in ONE_SHOT:
            assert "healthcheck" in service, f"{name} has no healthcheck"
            assert service["healthcheck"]["test"][0] in {"CMD", "CMD-SHELL"}
        for target, spec in (service.get("depends_on") or {}).items():
            assert target in SERVICES, (name, target)
            assert isinstance(spec, dict) and spec.get("condition") in CONDITIONS, (name, target)
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[target], (name, target)
            if "profiles" in SERVICES[target]:
                assert set(SERVICES[target]["profiles"]) <= set(service.get("profiles", [])), \
                    f"{name} (default profile) depends on profile-only {target}"


def _pinned(image: str) -> bool:
    ref = _resolved(image)
    tag = ref.rsplit(":", 1)[1] if ":" in ref.split("/")[-1] else ""
    return bool(tag) and tag != "latest"


def test_images_pinned() -> None:
    for name, service in SERVICES.items():
        assert _pinned(service["image"]), f"{name}: {service['image']}"
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM "):
            image = line.split()[1]
            assert image in {"app"} or _pinned(image), line


def _metrics_endpoints() -> set[str]:
    """host:port of every metrics endpoint the services expose."""
    out = set()
    for name, service in SERVICES.items():
        env = service.get("environment") or {}
        for key, value in env.items() if isinstance(env, dict) else ():
            if key.endswith("METRICS_PORT"):
                out.add(f"{name}:{value}")
        if name in {"vllm", "vllm-sim"}:
            out.add(f"{name}:8000")  # vLLM's /metrics on its API port
        if name.startswith("flink-") and name != "flink-submitter":
            assert "metrics.reporter.prom.port: 9249" in env["FLINK_PROPERTIES"]
            out.add(f"{name}:9249")
    return out


def test_prometheus_scrapes_every_metrics_endpoint() -> None:
    targets = {t for job in PROMETHEUS["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    missing = _metrics_endpoints() - targets
    assert not missing, f"not scraped: {sorted(missing)}"
    for target in targets - {"localhost:9090"}:
        assert target.split(":")[0] in SERVICES, target
    mounts = SERVICES["prometheus"]["volumes"]
    assert any(m.startswith("./deploy/prometheus.yml:") for m in mounts)


def test_dockerfile_targets_and_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = set(re.findall(r"^FROM \S+ AS (\w+)$", text, re.M))
    assert {"jars", "app", "gpu", "flink"} <= stages
    assert "USER 10001" in text and "USER flink" in text
    for service in SERVICES.values():
        target = (service.get("build") or {}).get("target")
        assert target is None or target in stages


def _flink_properties(service: str) -> dict[str, str]:
    lines = SERVICES[service]["environment"]["FLINK_PROPERTIES"].splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip())


def test_flink_state_is_on_a_volume_and_the_jobmanager_is_highly_available() -> None:
    for name in ("flink-jobmanager", "flink-taskmanager"):
        conf = _flink_properties(name)
        assert "flink-data:/flink-data" in SERVICES[name]["volumes"], name
        assert conf["execution.checkpointing.dir"] == "file:///flink-data/checkpoints"
        assert conf["execution.checkpointing.savepoint-dir"] == "file:///flink-data/savepoints"
        assert int(conf["execution.checkpointing.num-retained"]) >= 2
        assert conf["execution.checkpointing.externalized-checkpoint-retention"] == "RETAIN_ON_CANCELLATION"
        assert conf["high-availability.type"] == "zookeeper"
        assert conf["high-availability.zookeeper.quorum"] == "zookeeper:2181"
        assert conf["high-availability.storageDir"].startswith("file:///flink-data/")
        assert not {k for k in conf if k.startswith(("state.checkpoints.", "state.savepoints."))}  # Flink 1.x names
    assert set(COMPOSE["volumes"]) >= {"flink-data", "zookeeper-data"}
    assert re.fullmatch(r"zookeeper:3\.9\.\d+", SERVICES["zookeeper"]["image"])
    assert SERVICES["flink-jobmanager"]["depends_on"]["zookeeper"] == {"condition": "service_healthy"}
    # New volumes take the owner of the image's folder: the flink user's, so the JobManager can write.
    assert "install -d -o flink -g flink /flink-data" in (ROOT / "Dockerfile").read_text()


def test_the_submitter_submits_each_job_once_through_jobs_submit() -> None:
    submitter = SERVICES["flink-submitter"]
    assert submitter["restart"] == "on-failure"
    assert submitter["entrypoint"] == ["/bin/bash", "-c"]
    (script,) = submitter["command"]
    words = shlex.split(_resolved(script))
    assert words[:4] == ["exec", "python", "-m", "jobs.submit"]
    assert words[words.index("--rest-url") + 1] == "http://flink-jobmanager:8081"
    cut = words.index("--")
    assert words[words.index("--rest-url") + 2:cut] == ["model_minute", "user_risk", "ab_arm"]
    assert words[cut + 1:] == ["--no-jars", "--bootstrap", "kafka:9092", "--from", "earliest"]
    assert "flink run" not in script  # the loop that blocked on the first job


def test_every_gpu_stage_replica_has_its_own_transactional_id() -> None:
    ids = {}
    for name, service in SERVICES.items():
        env = service.get("environment") or {}
        for key, value in env.items():
            if key.endswith("TRANSACTIONAL_ID"):
                scalable = "replicas" in (service.get("deploy") or {})
                assert "{hostname}" in value or not scalable, f"{name}: replicas would share {value}"
                assert value not in ids.values(), (name, value)
                ids[name] = value
    assert ids["gpu-stage"] == "gpu-stage-cpu-{hostname}"
