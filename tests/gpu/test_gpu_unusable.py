"""Runs on every host: the GPU backend module imports without cuDF, and says why it cannot run."""

from __future__ import annotations

import pytest

from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.backends import choose
from gpu_stage.transform.cudf import device
from gpu_stage.transform.cudf.rows import device_safe
from llmpipe.errors import ConfigError

LIMIT = 1 << 20


def test_hidden_devices_give_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    reason = device.unusable_reason()
    assert reason is not None
    assert "CUDA_VISIBLE_DEVICES" in reason


def test_gpu_choice_fails_where_unusable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    with pytest.raises(ConfigError, match="cannot run here"):
        choose("gpu", TransformSettings(), pool_bytes=1 << 30)
    assert choose("auto", TransformSettings(), pool_bytes=1 << 30).name == "cpu"


@pytest.mark.parametrize(
    ("value", "safe"),
    [
        (b'{"id":"a","choices":[]}', True),
        ('{"id":"é"}'.encode(), True),
        (b'{"id":"a\nb"}', False),
        (b'{"id":"a"}\r', False),
        (b'{"id":"\\ud800"}', False),
        (b'{"x":NaN}', False),
        (b'{"choices":[{"message": null}]}', False),
        (b'{"id":"\xff"}', False),
        (b" {}", False),
        (b"", False),
        (b"[1]", False),
    ],
)
def test_pre_screen(value: bytes, safe: bool) -> None:
    assert device_safe(value, LIMIT) is safe


def test_pre_screen_size_limit() -> None:
    assert device_safe(b"{" + b" " * 8 + b"}", 10)
    assert not device_safe(b"{" + b" " * 9 + b"}", 10)
