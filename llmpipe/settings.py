"""Helpers for the one frozen settings object each service builds in ``main``.

Every option is a CLI flag whose default falls back to an environment variable, and ``--help`` shows
which (``[env: NAME]``), as bytewax does. Library code receives the settings object, never ``os.environ``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

from llmpipe.errors import ConfigError


class Secret:
    """A string that never shows itself in reprs, logs or metrics."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself, for the one place that sends it (an HTTP header, a librdkafka dict)."""
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('**********')" if self._value else "Secret('')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def env_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    env: str,
    *,
    default: Any = None,
    help: str,
    environ: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> None:
    """Add ``flag`` whose default comes from ``env`` when set, with both shown in ``--help``."""
    source = os.environ if environ is None else environ
    value = source.get(env, default)
    kind = kwargs.get("type")
    if env in source and kind is not None and kwargs.get("action") is None:
        value = kind(value)
    if kwargs.get("action") == "store_true" and env in source:
        value = source[env].strip().lower() in {"1", "true", "yes", "on"}
    shown = "***" if "secret" in kwargs.pop("shown", "") else default
    parser.add_argument(flag, default=value, help=f"{help} [env: {env}] (default: {shown})", **kwargs)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv`` (``sys.argv[1:]`` when None)."""
    return parser.parse_args(None if argv is None else list(argv))


ClientConfig = tuple[tuple[str, str], ...]
"""librdkafka properties as ``(key, value)`` pairs, in the order given (a later key wins)."""


def client_config_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    env: str,
    *,
    help: str,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Add a repeatable ``flag KEY=VALUE``; its entries follow those of ``env`` (pairs split by spaces)."""
    source = os.environ if environ is None else environ
    parser.add_argument(
        flag, action="append", default=source.get(env, "").split(), metavar="KEY=VALUE",
        help=f"{help}; repeatable, after the env var's pairs (a later key wins) [env: {env}, pairs split by spaces]",
    )  # fmt: skip


def client_config(entries: Sequence[str], flag: str, refused: frozenset[str]) -> ClientConfig:
    """``KEY=VALUE`` entries as pairs; a malformed entry, or a key in ``refused``, is a :class:`ConfigError`.

    ``refused`` holds the keys the service sets itself because a guarantee rests on them (or that
    have an option of their own): overriding one would break the guarantee without a word.
    """
    pairs = []
    for entry in entries:
        key, sep, value = entry.partition("=")
        key = key.strip()
        if not sep or not key:
            msg = f"{flag} takes KEY=VALUE: an entry has no '=' or no key (its text is not shown: it may hold a secret)"
            raise ConfigError(msg)
        if key in refused:
            msg = f"{flag} cannot set {key}: the service sets it (refused here: {', '.join(sorted(refused))})"
            raise ConfigError(msg)
        pairs.append((key, value))
    return tuple(pairs)
