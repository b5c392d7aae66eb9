"""Helpers for the one frozen settings object each service builds in ``main``.

Every option is a CLI flag whose default falls back to an environment variable, and ``--help`` shows
which (``[env: NAME]``), as bytewax does. Library code receives the settings object, never ``os.environ``.

Variables are named ``<SERVICE>_<OPTION>`` (``CONNECTOR_*``, ``GPU_STAGE_*``, ``JOBS_*``…), except the
ones every service reads alike (``KAFKA_*``). A renamed option or variable keeps its old name as a
deprecated alias (``old_flags``/``old_envs`` of :func:`env_option`): still honoured, hidden from
``--help``, and each use logged once as a warning naming the new one, so a deployment that sets the
old name keeps working and learns what to change.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from llmpipe.errors import ConfigError

T = TypeVar("T")

log = logging.getLogger(__name__)


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


class Refused(argparse.ArgumentTypeError):
    """A value outside an option's allowed values; :func:`parse_args` reports it as one line, not as usage."""


@dataclass(frozen=True)
class RefusedEnv:
    """The default of an option whose environment variable holds a refused value.

    Kept as the default instead of raising while the parser is built, so the error comes out of
    :func:`parse_args` like any other (one line, exit 2), and a value given on the command line,
    which wins over the variable, still lets the command run.
    """

    message: str


@dataclass(frozen=True)
class Renamed:
    """The default of an option that came from (or ignored) a deprecated environment variable.

    Kept as the default so that :func:`parse_args` logs :attr:`note` only when the default is what the
    option ends with: a flag given on the command line replaces it, and then the old variable played no part.
    """

    value: Any
    note: str


_NOTES = "_deprecated_names_used"
"""Namespace attribute where :class:`_OldFlag` notes each use of an old flag during one parse."""


class _OldFlag(argparse.Action):
    """A hidden old spelling of an option: sets the new option's value and notes that it was used.

    It takes the new option's ``type``, ``choices`` and ``nargs``, so a value is checked (and refused,
    naming the flag as typed) exactly as through the new name.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, *, new_flag: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new_flag = new_flag

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        notes: list[str] = getattr(namespace, _NOTES, [])
        notes.append(f"{option_string} is deprecated and will be removed: use {self.new_flag}")
        setattr(namespace, _NOTES, notes)


def _shown(text: str) -> str:
    """``text`` as an error quotes it: numbers as written, anything else in quotes (spaces show)."""
    try:
        float(text)
    except ValueError:
        return repr(text)
    return text.strip()


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Bounded:
    """An argparse ``type``: an integer or a number within bounds; anything else is :class:`Refused`.

    Every numeric option of every command takes one, so the allowed range is stated in one
    wording everywhere (``--max-in-flight must be an integer >= 1, not 0``), for a flag or an env var.
    """

    kind: type[int] | type[float]
    low: float | None = None
    high: float | None = None
    above: bool = False
    """The low bound itself is refused (``> low`` rather than ``>= low``)."""
    or_zero: bool = False
    """0 is allowed besides the range (an option whose 0 means "off")."""

    @property
    def allowed(self) -> str:
        """What the option takes, in words: ``an integer >= 1``, ``a number in (0, 1]``."""
        what = "an integer" if self.kind is int else "a number"
        if self.low is not None and self.high is not None:
            opening = "(" if self.above else "["
            what += f" in {opening}{_bound(self.low)}, {_bound(self.high)}]"
        elif self.low is not None:
            what += f" {'>' if self.above else '>='} {_bound(self.low)}"
        elif self.high is not None:
            what += f" <= {_bound(self.high)}"
        return f"0 or {what}" if self.or_zero else what

    def __call__(self, text: str) -> int | float:
        """``text`` as the option's value; :class:`Refused` when it is not one."""
        msg = f"must be {self.allowed}, not {_shown(text)}"
        try:
            value = self.kind(text)
        except ValueError as exc:
            raise Refused(msg) from exc
        if not self.accepts(value):
            raise Refused(msg)
        return value

    def accepts(self, value: float) -> bool:
        """Whether ``value`` (already of :attr:`kind`) is in range."""
        if self.or_zero and value == 0:
            return True
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return False
        return self.high is None or value <= self.high


integer = Bounded(int)
"""Any integer (a seed)."""
positive_int = Bounded(int, 1)
"""A count that must not be zero: 0 items per batch, call or transaction makes a service idle or spin."""
non_negative_int = Bounded(int, 0)
"""A count or duration in ms whose 0 has a documented meaning (off, unlimited, no wait)."""
positive_float = Bounded(float, 0, above=True)
"""A duration or rate in seconds that must not be zero (a timeout of 0 fails every call)."""
non_negative_float = Bounded(float, 0)
"""A duration in seconds where 0 means "no wait"."""
ratio = Bounded(float, 0, 1)
"""A probability or share."""
port = Bounded(int, 1, 65535)
"""A TCP port to listen on or connect to."""
port_or_any = Bounded(int, 0, 65535)
"""A TCP port to listen on, where 0 lets the OS pick a free one (the command says which it got)."""


class Checked(Generic[T]):
    """An argparse ``type`` from a converter that raises ``ValueError``, and words for what it allows."""

    def __init__(self, allowed: str, convert: Callable[[str], T]) -> None:
        self.allowed = allowed
        self._convert = convert

    def __call__(self, text: str) -> T:
        """``text`` converted; :class:`Refused` (with :attr:`allowed`) when the converter refuses it."""
        try:
            return self._convert(text)
        except ValueError as exc:
            msg = f"must be {self.allowed}, not {text!r}"
            raise Refused(msg) from exc

    def __repr__(self) -> str:
        return f"Checked({self.allowed!r})"


def _non_empty(text: str) -> str:
    if not text.strip():
        msg = "empty"
        raise ValueError(msg)
    return text


_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _topic(text: str) -> str:
    if not _TOPIC.fullmatch(text) or text in {".", ".."}:
        msg = "not a topic name"
        raise ValueError(msg)
    return text


non_empty = Checked("a non-empty string", _non_empty)
"""A name that must be given (a group id, a transactional id, a model)."""
topic_name = Checked("a Kafka topic name (1-249 letters, digits, '.', '_' or '-')", _topic)
"""A topic the command reads, writes or creates: Kafka refuses other names, but only once the run began."""

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _switch(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    msg = f"must be one of {', '.join(_TRUE + _FALSE[:-1])} (or empty), not {text!r}"
    raise Refused(msg)


def _env_value(text: str, kwargs: Mapping[str, Any]) -> Any:
    """The option's value from its env var's ``text``: converted, checked against choices; :class:`Refused`."""
    if kwargs.get("action") == "store_true":
        return _switch(text)
    kind = kwargs.get("type")
    value = kind(text) if kind is not None and kwargs.get("action") is None else text
    choices = kwargs.get("choices")
    if choices is not None and value not in choices:
        msg = f"must be one of {', '.join(map(str, choices))}, not {text!r}"
        raise Refused(msg)
    return value


def _env_default(env: str, flag: str, text: str, kwargs: Mapping[str, Any]) -> Any:
    """The default an env var gives ``flag``, or a :class:`RefusedEnv` that says why it cannot."""
    try:
        return _env_value(text, kwargs)
    except Refused as exc:
        return RefusedEnv(f"{env} ({flag}) {exc}")
    except (ValueError, TypeError) as exc:
        return RefusedEnv(f"{env} ({flag}) is not valid: {exc}")


def _old_env_default(
    env: str, flag: str, value: Any, source: Mapping[str, str], old_envs: Sequence[str], kwargs: Mapping[str, Any]
) -> Any:
    """``value``, or what the first set variable of ``old_envs`` gives when ``env`` is unset, as :class:`Renamed`.

    When both are set the new one wins, and the note says the old one is ignored: a deployment that
    set both may believe the old value is in force.
    """
    old = next((name for name in old_envs if name in source), None)
    if old is None:
        return value
    if env in source:
        return Renamed(value, f"{old} is deprecated and ignored: {env} ({flag}) is set")
    return Renamed(_env_default(old, flag, source[old], kwargs), f"{old} is deprecated and will be removed: set {env}")


def _add_old_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, new: argparse.Action, old_flags: Sequence[str]
) -> None:
    """Add ``old_flags`` as hidden aliases of the option ``new`` (see :class:`_OldFlag`)."""
    if not old_flags:
        return
    if not isinstance(new, argparse._StoreAction | argparse._StoreTrueAction):
        msg = f"old flags of {new.option_strings[0]}: only store and store_true options have them"
        raise TypeError(msg)
    same: dict[str, Any] = {"nargs": new.nargs, "const": new.const, "type": new.type, "choices": new.choices,
                            "metavar": new.metavar}  # fmt: skip
    parser.add_argument(*old_flags, dest=new.dest, action=_OldFlag, new_flag=new.option_strings[0],
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS, **same)  # fmt: skip


def env_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    env: str,
    *,
    default: Any = None,
    help: str,
    environ: Mapping[str, str] | None = None,
    old_flags: Sequence[str] = (),
    old_envs: Sequence[str] = (),
    **kwargs: Any,
) -> None:
    """Add ``flag`` whose default comes from ``env`` when set, with both shown in ``--help``.

    The env value goes through the option's ``type`` and ``choices`` as a flag's would (argparse
    checks neither on a default); a refused one is reported by :func:`parse_args`.

    ``old_flags`` and ``old_envs`` are names the option had before a rename: still honoured (a
    variable only while ``env`` is unset), left out of ``--help``, and each use logged once as a
    warning naming the new name when :func:`parse_args` succeeds.
    """
    source = os.environ if environ is None else environ
    value = _env_default(env, flag, source[env], kwargs) if env in source else default
    value = _old_env_default(env, flag, value, source, old_envs, kwargs)
    shown = "***" if "secret" in kwargs.pop("shown", "") else default
    action = parser.add_argument(flag, default=value, help=f"{help} [env: {env}] (default: {shown})", **kwargs)
    _add_old_flags(parser, action, old_flags)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv`` (``sys.argv[1:]`` when None); a refused value is a one-line :class:`ConfigError`.

    A value a ``type`` refuses (given as a flag, or from an env var) names the option (and the
    variable) and what it allows, without the usage text: the mistake is the value, not the command
    line. Argparse's own errors (unknown option, missing value, a choice) stay usage errors (exit 2).
    Once every value is accepted, each deprecated name that was used is logged once as a warning
    (not before: a refused value stays the one line a bad start prints).
    """
    parser.exit_on_error = False
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except argparse.ArgumentError as exc:
        if isinstance(exc.__context__, Refused) and exc.argument_name:
            msg = f"{exc.argument_name} {exc.message}"
            raise ConfigError(msg) from exc
        parser.error(str(exc))
    given = vars(args)
    notes: list[str] = given.pop(_NOTES, [])
    for name, value in given.items():
        if isinstance(value, Renamed):
            given[name] = value.value
            notes.append(value.note)
    for value in given.values():
        if isinstance(value, RefusedEnv):
            raise ConfigError(value.message)
    for note in dict.fromkeys(notes):
        log.warning("%s", note)
    return args


def require_file(path: str | None, option: str) -> None:
    """Refuse a ``path`` that is not a readable file now rather than when first opened, mid-run."""
    if not path:
        return
    where = Path(path)
    if not where.exists():
        problem = "no such file"
    elif where.is_dir():
        problem = "is a folder, not a file"
    elif not os.access(where, os.R_OK):
        problem = "cannot be read (permission denied)"
    else:
        return
    msg = f"{option} {path}: {problem}"
    raise ConfigError(msg)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def check_one_of(value: str | None, option: str, allowed: Iterable[str]) -> None:
    """Refuse ``value`` (when set) unless it is one of ``allowed`` (compared without case)."""
    names = tuple(allowed)
    if value is not None and value.upper() not in names:
        msg = f"{option} must be one of {', '.join(names)}, not {value!r}"
        raise ConfigError(msg)


def check_kafka_options(args: argparse.Namespace) -> None:
    """Check the shared Kafka options at start (librdkafka would refuse them only when a client is made)."""
    if not args.bootstrap.strip():
        msg = f"--bootstrap must be host:port[,host:port…], not {args.bootstrap!r}"
        raise ConfigError(msg)
    check_one_of(args.security_protocol, "--security-protocol", SECURITY_PROTOCOLS)
    check_one_of(args.sasl_mechanism or None, "--sasl-mechanism", SASL_MECHANISMS)
    location = args.ssl_ca_location
    if location and location != "probe" and not Path(location).exists():
        msg = f"--ssl-ca-location {location}: no such file or folder"
        raise ConfigError(msg)


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
