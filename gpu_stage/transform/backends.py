"""Choose the backend, never silently: ``gpu`` without a usable GPU is an error, ``auto`` says what it chose."""

from __future__ import annotations

import importlib
import logging
from typing import Literal

from gpu_stage.transform.api import Backend, TransformSettings
from gpu_stage.transform.contract.reference import ReferenceBackend
from gpu_stage.transform.cudf import device as cudf_device
from gpu_stage.transform.native import NativeBackend, native_unusable_reason
from llmpipe.errors import ConfigError

log = logging.getLogger(__name__)

Choice = Literal["auto", "gpu", "gpu-cudf", "cpu", "reference"]


def gpu_unusable_reason() -> str | None:
    """Why the GPU backend cannot run here, or None when it can (cuDF imports and a device answers).

    Asked of :mod:`gpu_stage.transform.cudf.device` alone, so a CPU host does not load the GPU backend.
    """
    return cudf_device.unusable_reason()


CHOICES: tuple[Choice, ...] = ("auto", "gpu", "gpu-cudf", "cpu", "reference")


def by_name(name: str, settings: TransformSettings, pool_bytes: int) -> Backend:
    """:func:`choose` for a name from a command line or a list (benchmarks); unknown names are errors."""
    for choice in CHOICES:
        if name == choice:
            return choose(choice, settings, pool_bytes)
    msg = f"unknown backend {name!r} (one of {', '.join(CHOICES)})"
    raise ConfigError(msg)


def choose(choice: Choice, settings: TransformSettings, pool_bytes: int) -> Backend:
    """Build the backend for ``choice``; raise ``ConfigError`` when the one asked for cannot run.

    ``auto`` prefers the GPU, then the native CPU core, then the reference (pure Python), and logs
    why it passed over the faster ones.
    """
    if choice == "reference":
        log.info("backend: reference (asked for)")
        return ReferenceBackend(settings)
    if choice == "cpu":
        log.info("backend: cpu (asked for)")
        return NativeBackend(settings)
    reason = gpu_unusable_reason()
    if reason is None:
        gpu = importlib.import_module("gpu_stage.transform.gpu")
        log.info("backend: %s (%s)", choice, "auto: a usable GPU was found" if choice == "auto" else "asked for")
        lane = "cudf" if choice == "gpu-cudf" else "kernel"
        backend: Backend = gpu.GpuBackend(settings, pool_bytes=pool_bytes, lane=lane)
        return backend
    if choice in ("gpu", "gpu-cudf"):
        msg = f"--backend gpu, but the GPU backend cannot run here: {reason}"
        raise ConfigError(msg)
    native_reason = native_unusable_reason()
    if native_reason is None:
        log.info("backend: cpu (auto: %s)", reason)
        return NativeBackend(settings)
    log.warning("backend: reference (auto: %s; %s)", reason, native_reason)
    return ReferenceBackend(settings)
