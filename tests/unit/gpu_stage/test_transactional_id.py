"""``--transactional-id`` with ``{hostname}``: one id per replica, the same id for a restarted replica."""

from __future__ import annotations

import socket

import pytest

from gpu_stage.settings import expand_transactional_id, parse


def test_two_hostnames_give_two_ids_and_one_hostname_the_same_id() -> None:
    template = "gpu-stage-{hostname}"
    first = expand_transactional_id(template, "c0ffee000001")
    second = expand_transactional_id(template, "c0ffee000002")
    assert first == "gpu-stage-c0ffee000001" and second == "gpu-stage-c0ffee000002"
    assert first != second
    assert expand_transactional_id(template, "c0ffee000001") == first  # the replica restarted


def test_an_id_without_the_placeholder_is_kept_as_given() -> None:
    assert expand_transactional_id("gpu-stage-gpu-0", "anything") == "gpu-stage-gpu-0"


def test_the_worker_settings_use_this_hosts_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "inference-3")
    monkeypatch.setenv("GPU_STAGE_TRANSACTIONAL_ID", "gpu-stage-{hostname}")
    _, settings = parse([])
    assert settings.transactional_id == "gpu-stage-inference-3"
    _, settings = parse(["--transactional-id", "stage-{hostname}-a"])
    assert settings.transactional_id == "stage-inference-3-a"
