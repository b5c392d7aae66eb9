"""Connection settings of a service's Kafka clients: command-line options, env fallbacks, librdkafka config."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llmpipe.errors import ConfigError
from llmpipe.kafka_io.logs import rdkafka_log
from llmpipe.settings import Secret, env_option, non_negative_float

COMPRESSIONS = ("none", "lz4", "zstd", "snappy", "gzip")
"""librdkafka's ``compression.type`` values."""


@dataclass(frozen=True)
class KafkaSettings:
    """Connection settings shared by every client of one service."""

    bootstrap: str = "127.0.0.1:19092"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret = field(default_factory=lambda: Secret(""))
    ssl_ca_location: str | None = None
    compression: str = "lz4"
    """What this service's producers compress record batches with (``compression.type``). lz4 saves
    network and broker disk for little CPU; ``none`` saves this client's compressing and the
    consumers' decompressing but costs the broker more per record (1.7 times as much with a broker on the same
    host), so it pays only where the broker has CPU to spare."""
    extra: Mapping[str, str] = field(default_factory=dict)
    wait_s: float = 30.0
    """How long a service waits at start for a cluster that does not answer before it gives up
    with one line (see :func:`await_cluster`); once running, an outage is ridden out instead."""

    def __post_init__(self) -> None:
        if self.compression not in COMPRESSIONS:
            msg = f"compression must be one of {', '.join(COMPRESSIONS)}, not {self.compression!r}"
            raise ConfigError(msg)

    def client_config(self) -> dict[str, Any]:
        """Librdkafka configuration, made at the edge (the secret is revealed only here)."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.security_protocol,
            "logger": rdkafka_log,
        }
        optional = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "ssl.ca.location": self.ssl_ca_location,
        }
        config.update({k: v for k, v in optional.items() if v})
        if self.sasl_password:
            config["sasl.password"] = self.sasl_password.reveal()
        config.update(self.extra)
        return config

    @staticmethod
    def add_options(parser: argparse.ArgumentParser, prefix: str) -> None:
        """Add ``--bootstrap`` and security options falling back to ``<prefix>_*``/``KAFKA_*`` env vars."""
        group = parser.add_argument_group("Kafka")
        env_option(group, "--bootstrap", "KAFKA_BOOTSTRAP", default="127.0.0.1:19092",
                   help="Kafka bootstrap servers")
        env_option(group, "--security-protocol", "KAFKA_SECURITY_PROTOCOL", default="PLAINTEXT",
                   help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
        env_option(group, "--sasl-mechanism", "KAFKA_SASL_MECHANISM",
                   help="SASL mechanism (PLAIN, SCRAM-SHA-512…)")
        env_option(group, "--sasl-username", "KAFKA_SASL_USERNAME", help="SASL user name")
        env_option(group, "--sasl-password", "KAFKA_SASL_PASSWORD", help="SASL password", shown="secret")
        env_option(group, "--ssl-ca-location", "KAFKA_SSL_CA_LOCATION", help="CA bundle for SSL")
        env_option(group, "--compression", "KAFKA_COMPRESSION", default="lz4", choices=COMPRESSIONS,
                   help="compression of the record batches this service produces (none: no CPU spent on it "
                   "here or in consumers, more in the broker)")
        env_option(group, "--kafka-wait-s", "KAFKA_WAIT_S", default=30.0, type=non_negative_float,
                   help="at start, how long to wait for a Kafka cluster that does not answer before exiting")
        del prefix

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> KafkaSettings:
        """Build from options added by :meth:`add_options`."""
        return cls(
            bootstrap=args.bootstrap,
            security_protocol=args.security_protocol,
            sasl_mechanism=args.sasl_mechanism,
            sasl_username=args.sasl_username,
            sasl_password=Secret(args.sasl_password or ""),
            ssl_ca_location=args.ssl_ca_location,
            compression=args.compression,
            wait_s=args.kafka_wait_s,
        )


def native_config(config: Mapping[str, Any]) -> dict[str, str]:
    """A client configuration as the native core's clients take it: every property a string.

    Booleans are written as librdkafka writes them; the ``logger`` is left out, as those clients hand
    librdkafka's lines back through ``take_logs``.
    """
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in config.items() if k != "logger"}
