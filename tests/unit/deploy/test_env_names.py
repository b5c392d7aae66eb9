"""The variables docker-compose.yml and k8s/ set are ones the services read, under their current names.

A renamed variable is still honoured with a warning, so a deployment left on the old name would run;
this catches it before the old name is dropped (or a typo that nothing reads at all).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
ENV = re.compile(r"\[env: (\w+)")
CHECKED = ("CONNECTOR_", "JOBS_")
"""The services whose every variable is checked here (their prefix)."""


def _read(parser: argparse.ArgumentParser) -> set[str]:
    return {name for action in parser._actions for name in ENV.findall(action.help or "")}


def _known() -> set[str]:
    from connector.settings import build_parser
    from jobs import ab_arm, cli

    names = _read(build_parser()) | _read(ab_arm.parser())
    for job in ("jobs.model_minute", "jobs.user_risk"):
        names |= _read(cli.parser(job, None))
    return names


def _compose_env() -> dict[str, set[str]]:
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return {name: set(spec.get("environment") or {}) for name, spec in services.items()}


def _k8s_env() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    listed = yaml.safe_load((ROOT / "k8s" / "kustomization.yaml").read_text())["resources"]
    for path in (ROOT / "k8s" / name for name in listed):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            name = f"{path.name}:{doc['kind']}/{doc['metadata']['name']}"
            if doc["kind"] == "ConfigMap":
                found[name] = set(doc.get("data") or {})
                continue
            spec = doc.get("spec") or {}
            pod = (spec.get("template") or spec.get("podTemplate") or {}).get("spec") or {}
            for container in pod.get("containers") or []:
                found[f"{name}/{container['name']}"] = {e["name"] for e in container.get("env") or []}
    return found


def _unknown(where: dict[str, set[str]], known: set[str]) -> dict[str, set[str]]:
    bad = {place: {n for n in names if n.startswith(CHECKED) and n not in known} for place, names in where.items()}
    return {place: names for place, names in bad.items() if names}


def test_compose_sets_only_variables_the_connector_and_jobs_read() -> None:
    assert _unknown(_compose_env(), _known()) == {}


def test_k8s_sets_only_variables_the_connector_and_jobs_read() -> None:
    assert _unknown(_k8s_env(), _known()) == {}


def test_the_content_schema_is_set_under_its_new_name_and_bootstrap_stays_shared() -> None:
    compose = _compose_env()
    k8s = _k8s_env()
    config = k8s["config.yaml:ConfigMap/llmpipe"]
    assert "CONNECTOR_CONTENT_SCHEMA" in compose["connector"] and "CONNECTOR_CONTENT_SCHEMA" in config
    everywhere = set().union(*compose.values(), *k8s.values())
    assert not {"CONNECTOR_JSON_SCHEMA", "CONTENT_SCHEMA", "TYPED_TOPIC", "FEATURES_TOPIC", "DLQ_TOPIC"} & everywhere
    assert "KAFKA_BOOTSTRAP" in _known()
    assert "KAFKA_BOOTSTRAP" in config and "KAFKA_BOOTSTRAP" in compose["connector"]
