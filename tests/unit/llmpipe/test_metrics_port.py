"""A port that is taken is a one-line setting error (exit 2), for every service that listens on one."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmpipe.errors import ConfigError
from llmpipe.listen import address, bind_error, serve_metrics

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def taken() -> Iterator[int]:
    """A port some other process listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _clean_env() -> dict[str, str]:
    prefixes = ("CONNECTOR_", "GPU_STAGE_", "VLLM_SIM_", "KAFKA_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def test_serve_metrics_on_a_taken_port_names_option_and_address(taken: int) -> None:
    with pytest.raises(ConfigError) as refused:
        serve_metrics(taken, "127.0.0.1")
    assert str(refused.value) == f"--metrics-port {taken}: address 127.0.0.1:{taken} is in use"
    assert isinstance(refused.value.__cause__, OSError)


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (OSError(errno.EADDRINUSE, "Address already in use"), "--port 80: address [::1]:80 is in use"),
        (OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"),
         "--host ::1: address [::1]:80 is not one of this machine's"),
        (OSError(errno.EACCES, "Permission denied"), "--port 80: cannot listen on [::1]:80 (Permission denied)"),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
         "--host ::1: not a host name or address of this machine (Name or service not known)"),
    ],
)  # fmt: skip
def test_bind_errors_name_the_option_at_fault(exc: OSError, line: str) -> None:
    assert str(bind_error(exc, "::1", 80, "--port", "--host")) == line


def test_address_brackets_ipv6() -> None:
    assert (address("0.0.0.0", 9100), address("::", 9100)) == ("0.0.0.0:9100", "[::]:9100")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["connector", "--input-file", "README.md", "--metrics-port", "{port}"],
         "connector: --metrics-port {port}: address 127.0.0.1:{port} is in use"),
        (["gpu_stage", "--backend", "reference", "--metrics-port", "{port}"],
         "gpu_stage: --metrics-port {port}: address 127.0.0.1:{port} is in use"),
        (["vllm_sim", "--port", "{port}"], "vllm_sim: --port {port}: address 127.0.0.1:{port} is in use"),
    ],
)  # fmt: skip
def test_a_service_on_a_taken_port_exits_2_with_one_line(taken: int, argv: list[str], line: str) -> None:
    command = [sys.executable, "-m", *(arg.format(port=taken) for arg in argv)]
    done = subprocess.run(command, cwd=ROOT, env=_clean_env(), capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert (done.returncode, done.stderr, done.stdout) == (2, line.format(port=taken) + "\n", "")
