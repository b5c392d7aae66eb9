"""Listening on a port a service was told to use, and the one-line error when it cannot.

A port that is taken (a second instance on one host, a leftover process) or a host that is not
this machine's is a setting to fix, not a crash: :class:`ConfigError` naming the option and the
address, which each command's ``main`` prints as one line and exits 2 with.
"""

from __future__ import annotations

import errno
import socket

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

from llmpipe.errors import ConfigError


def address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_error(exc: OSError, host: str, port: int, port_option: str, host_option: str) -> ConfigError:
    """The :class:`ConfigError` for a failed bind of ``host:port``: the option at fault, the address, why."""
    where = address(host, port)
    if isinstance(exc, socket.gaierror):
        msg = f"{host_option} {host}: not a host name or address of this machine ({exc.strerror or exc})"
    elif exc.errno == errno.EADDRINUSE:
        msg = f"{port_option} {port}: address {where} is in use"
    elif exc.errno == errno.EADDRNOTAVAIL:
        msg = f"{host_option} {host}: address {where} is not one of this machine's"
    else:
        msg = f"{port_option} {port}: cannot listen on {where} ({exc.strerror or exc})"
    return ConfigError(msg)


def serve_metrics(
    port: int,
    host: str,
    registry: CollectorRegistry = REGISTRY,
    *,
    port_option: str = "--metrics-port",
    host_option: str = "--metrics-host",
) -> None:
    """Serve ``registry`` for Prometheus on ``host:port`` (a daemon thread); :class:`ConfigError` if it cannot."""
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise bind_error(exc, host, port, port_option, host_option) from exc
