"""Choose the backend, never silently: ``gpu`` without a usable GPU is an error, ``auto`` says what it chose."""

from __future__ import annotations

import importlib
import logging
from typing import Literal

from gpu_stage.backends.base import Backend, TransformSettings
from gpu_stage.backends.cpu import CpuBackend
from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)


def gpu_unusable_reason() -> str | None:
    """Why the GPU backend cannot run here, or None when it can (cuDF imports and a device answers)."""
    try:
        gpu = importlib.import_module("gpu_stage.backends.gpu")
    except ImportError as exc:
        return f"cuDF is not importable ({exc})"
    reason: str | None = gpu.unusable_reason()
    return reason


def choose(choice: Literal["auto", "gpu", "cpu"], settings: TransformSettings, pool_bytes: int) -> Backend:
    """Build the backend for ``choice``; raise ``ConfigError`` when ``gpu`` is asked for and unusable."""
    if choice == "cpu":
        log.info("backend: cpu (asked for)")
        return CpuBackend(settings)
    reason = gpu_unusable_reason()
    if reason is None:
        gpu = importlib.import_module("gpu_stage.backends.gpu")
        log.info("backend: gpu (%s)", "asked for" if choice == "gpu" else "auto: a usable GPU was found")
        backend: Backend = gpu.GpuBackend(settings, pool_bytes=pool_bytes)
        return backend
    if choice == "gpu":
        msg = f"--backend gpu, but the GPU backend cannot run here: {reason}"
        raise ConfigError(msg)
    log.info("backend: cpu (auto: %s)", reason)
    return CpuBackend(settings)
