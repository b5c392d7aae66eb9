"""The schema registry: the one module that talks to it, and the Confluent wire format of its records.

A typed record in the Confluent wire format is one magic byte (0), the writer schema's registry id as a
4-byte big-endian integer, then the Avro datum. Confluent's deserializers, Flink's ``avro-confluent``
format, Kafka Connect converters, ksqlDB and Spark's ``from_avro`` read it by fetching the id's schema
from the registry; the plain ``avro`` datum alone names no schema, so none of them can.

The registry speaks Confluent's REST API (Confluent Schema Registry, Karapace, Apicurio's ``ccompat``
API, Redpanda). Subjects follow the TopicNameStrategy: ``<topic>-value``. Only the registration call and
the lookup by id are needed here. Credentials may ride in the URL's user info
(``https://user:password@host``); they go out as HTTP basic auth and :func:`redact` hides them in
every message.

httpx is imported when a client is made: the Flink jobs import this module for the URL checks only,
and a Flink client environment may lack httpx.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import numpy as np
import numpy.typing as npt

from llmpipe.errors import ConfigError, SerializationError, SourceError
from llmpipe.settings import Checked, Refused

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

MAGIC_BYTE = 0
"""First byte of every Confluent-framed value (the format's only version)."""
PREFIX_BYTES = 5
"""Magic byte plus the 4-byte schema id, before the Avro datum."""
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
"""Media type of the registry API's requests and answers."""
MAX_SCHEMA_ID = 2**31 - 1
"""Registry ids are Java ints: positive and below 2^31."""
_PREFIX = struct.Struct(">bI")


def subject_for(topic: str) -> str:
    """The value subject of ``topic`` under the TopicNameStrategy every Confluent-compatible tool defaults to."""
    return f"{topic}-value"


def wire_prefix(schema_id: int) -> bytes:
    """The 5 bytes that go before each datum written with schema ``schema_id``."""
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        msg = f"schema id {schema_id} is outside 0..{MAX_SCHEMA_ID}"
        raise SerializationError(msg)
    return _PREFIX.pack(MAGIC_BYTE, schema_id)


def frame(schema_id: int, datum: bytes) -> bytes:
    """One Avro datum in the Confluent wire format."""
    return wire_prefix(schema_id) + datum


def unframe(value: bytes) -> tuple[int, bytes]:
    """``(schema id, Avro datum)`` of a Confluent-framed value; :class:`SerializationError` if it is not one."""
    if len(value) < PREFIX_BYTES or value[0] != MAGIC_BYTE:
        msg = f"not in the Confluent wire format (magic byte 0 and a 4-byte schema id): starts {value[:5]!r}"
        raise SerializationError(msg)
    magic, schema_id = _PREFIX.unpack_from(value)
    del magic
    return schema_id, value[PREFIX_BYTES:]


def framed(prefix: bytes, buf: bytes | memoryview, offsets: npt.NDArray[np.int64]) -> Iterator[bytes]:
    """Row ``i`` of a buffer of back-to-back datums (``buf[offsets[i]:offsets[i + 1]]``) behind ``prefix``.

    Each value is built by one copy straight from the buffer (``prefix + view``, without a slice of
    ``bytes`` in between), so framing costs what producing plain datums costs; lazily, in row order.
    """
    view = memoryview(buf).cast("B")
    ends = offsets.tolist()
    return map(prefix.__add__, map(view.__getitem__, map(slice, ends, ends[1:])))


def _check_url(text: str) -> str:
    parts = urlsplit(text.strip())
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        msg = "not an http(s) URL"
        raise ValueError(msg)
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when asked
    except ValueError as exc:
        msg = "bad port"
        raise ValueError(msg) from exc
    return text.strip().rstrip("/")


class _RegistryUrl(Checked[str]):
    """:class:`Checked` that never echoes user info: a refused URL may still carry a password."""

    def __call__(self, text: str) -> str:
        try:
            return _check_url(text)
        except ValueError as exc:
            shown = "…@" + text.rsplit("@", 1)[1] if "@" in text else text
            msg = f"must be {self.allowed}, not {shown!r}"
            raise Refused(msg) from exc


registry_url = _RegistryUrl("an http:// or https:// URL of a schema registry (its Confluent-compatible API)",
                            _check_url)
"""The argparse ``type`` of every ``--schema-registry-url``."""


@dataclass(frozen=True)
class RegistryAddress:
    """A registry URL split into the URL that is sent and the basic-auth credentials that were in it."""

    url: str
    user: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        return f"RegistryAddress({self.url!r}, user={self.user!r}, password={'***' if self.password else None})"

    @classmethod
    def parse(cls, url: str) -> RegistryAddress:
        """``url`` without its user info, and the user info as credentials."""
        parts = urlsplit(url)
        if parts.username is None:
            return cls(url.rstrip("/"))
        host = parts.netloc.rsplit("@", 1)[1]
        bare = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)).rstrip("/")
        return cls(bare, unquote(parts.username), unquote(parts.password or ""))


def redact(url: str) -> str:
    """``url`` as logs and errors may show it: a password in its user info replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"{parts.username}:***@{host}", parts.path, parts.query, parts.fragment))


class RegistryUnreachable(SourceError):
    """The registry did not answer, or answered with a server error: worth retrying."""


class RegistryRefused(ConfigError):
    """The registry answered and refused the request (incompatible or invalid schema, auth, unknown path)."""


class RegistryClient:
    """The registry calls the pipeline makes: register a schema under a subject, look a schema up by id."""

    def __init__(
        self, url: str, timeout_s: float = 10.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        """``url``: the registry's Confluent-compatible API root; ``transport``: for tests."""
        import httpx  # here, not at the top: see the module docstring

        self.address = RegistryAddress.parse(url)
        auth = (self.address.user, self.address.password or "") if self.address.user is not None else None
        self._http = httpx.Client(
            base_url=self.address.url, timeout=timeout_s, auth=auth, transport=transport,
            headers={"Accept": CONTENT_TYPE}, follow_redirects=True,
        )  # fmt: skip

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def register(self, subject: str, schema: Mapping[str, Any]) -> int:
        """Register the Avro ``schema`` under ``subject`` (or find it there); its registry id.

        Registering is idempotent: the same schema again returns the same id. A schema the subject's
        compatibility rule refuses is :class:`RegistryRefused` naming the subject.
        """
        body = {"schema": json.dumps(schema, separators=(",", ":")), "schemaType": "AVRO"}
        answer = self._call("POST", f"/subjects/{_path(subject)}/versions", f"registering subject {subject}", body)
        schema_id = answer.get("id")
        if not isinstance(schema_id, int) or isinstance(schema_id, bool) or not 0 <= schema_id <= MAX_SCHEMA_ID:
            msg = f"schema registry {redact(self.address.url)}: no schema id in the answer for subject {subject}"
            raise RegistryRefused(msg)
        return schema_id

    def schema(self, schema_id: int) -> dict[str, Any]:
        """The Avro schema registered with id ``schema_id``, parsed."""
        answer = self._call("GET", f"/schemas/ids/{int(schema_id)}", f"looking up schema id {schema_id}")
        text = answer.get("schema")
        if not isinstance(text, str):
            msg = f"schema registry {redact(self.address.url)}: no schema for id {schema_id}"
            raise RegistryRefused(msg)
        parsed: dict[str, Any] = json.loads(text)
        return parsed

    def _call(self, method: str, path: str, doing: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        import httpx  # here, not at the top: see the module docstring

        where = f"schema registry {redact(self.address.url)}"
        try:
            response = self._http.request(method, path, json=body, headers={"Content-Type": CONTENT_TYPE})
        except httpx.HTTPError as exc:
            msg = f"{where} unreachable while {doing}: {type(exc).__name__}: {exc}"
            raise RegistryUnreachable(msg) from exc
        if response.status_code >= 500 or response.status_code in {408, 429}:
            msg = f"{where} answered {response.status_code} while {doing}: {_message(response)}"
            raise RegistryUnreachable(msg)
        if response.status_code >= 300:
            msg = f"{where} refused {doing}: HTTP {response.status_code}: {_message(response)}"
            raise RegistryRefused(msg)
        try:
            answer = response.json()
        except ValueError as exc:
            msg = f"{where} answered {doing} with something other than JSON: {response.text[:200]!r}"
            raise RegistryRefused(msg) from exc
        if not isinstance(answer, dict):
            msg = f"{where} answered {doing} with {type(answer).__name__}, not a JSON object"
            raise RegistryRefused(msg)
        return answer


def _path(subject: str) -> str:
    return quote(subject, safe="")


def _message(response: httpx.Response) -> str:
    """The registry's own error text (``{"error_code": …, "message": …}``), else the start of the body."""
    try:
        answer = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(answer, dict) and "message" in answer:
        return str(answer["message"])
    return json.dumps(answer)[:300]


def register_until_done(
    client: RegistryClient,
    subject: str,
    schema: Mapping[str, Any],
    *,
    stopping: Callable[[], bool] = lambda: False,
    log_every_s: float = 30.0,
    max_backoff_s: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
) -> int | None:
    """Register ``schema`` under ``subject``, riding out a registry that does not answer; its id.

    An unreachable registry (connection refused, timeouts, 5xx) is retried with doubling backoff up to
    ``max_backoff_s``, and logged once when it starts, then at most once per ``log_every_s``, so a
    registry down for an hour costs a few lines, not a restart loop. A refusal
    (:class:`RegistryRefused`) is raised at once. Returns None when ``stopping()`` turns true first.
    """
    backoff = 0.2
    failing_since: float | None = None
    last_logged = 0.0
    attempts = 0
    while not stopping():
        attempts += 1
        try:
            schema_id = client.register(subject, schema)
        except RegistryUnreachable as exc:
            now = time.monotonic()
            if failing_since is None:
                failing_since = last_logged = now
                log.warning("%s; retrying until it answers", exc)
            elif now - last_logged >= log_every_s:
                last_logged = now
                log.warning("schema registry still unreachable after %.0fs (%d attempts): %s",
                            now - failing_since, attempts, exc)  # fmt: skip
            sleep(backoff)
            backoff = min(backoff * 2, max_backoff_s)
            continue
        if failing_since is not None:
            log.info("schema registry answered after %.0fs", time.monotonic() - failing_since)
        return schema_id
    return None
