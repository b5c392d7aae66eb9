"""How typed values go on the wire: plain Avro datums, or Confluent-framed with a registered schema id.

With ``--schema-registry-url`` the worker registers the typed record's Avro schema under
``<typed topic>-value`` before it joins the consumer group, and every typed value is then the 5-byte
Confluent prefix (magic byte, schema id) followed by the datum, so any Confluent-compatible reader can
decode the topic. The fingerprint header is written either way. Without the option nothing changes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gpu_stage.settings import WorkerSettings
from gpu_stage.transform.batch import EncodedRows
from llmpipe.errors import ConfigError
from llmpipe.record import TypedRecord
from llmpipe.registry import RegistryClient, framed, redact, register_until_done, subject_for, wire_prefix

log = logging.getLogger(__package__)  # the worker's one logger, "gpu_stage.worker"


def value_prefix(settings: WorkerSettings, typed_topic: str, fingerprint: str) -> bytes | None:
    """The prefix of every typed value: None for plain Avro, else the Confluent prefix of the registered id.

    An unreachable registry is waited for (bounded logging, see
    :func:`~llmpipe.registry.register_until_done`) before the consumer joins its group, so nothing is
    read meanwhile; one that refuses the schema stops the start with a
    :class:`~llmpipe.errors.ConfigError` naming the subject.
    """
    url = settings.schema_registry_url
    if not url:
        return None
    record = TypedRecord.from_file(settings.content_schema)
    if record.fingerprint != fingerprint:
        msg = f"typed schema fingerprint {record.fingerprint} differs from the topic's {fingerprint}"
        raise ConfigError(msg)
    subject = subject_for(typed_topic)
    with RegistryClient(url) as client:
        schema_id = register_until_done(client, subject, record.avro)
    if schema_id is None:  # only a stopping() callback ends the wait without an id, and none is given
        msg = f"no schema id for subject {subject}"
        raise ConfigError(msg)
    log.info("typed values in the Confluent wire format: subject %s, schema id %d at %s",
             subject, schema_id, redact(url))  # fmt: skip
    return wire_prefix(schema_id)


def typed_values(encoded: EncodedRows, prefix: bytes | None) -> Iterable[bytes]:
    """The values to produce for ``encoded``: its datums, each behind ``prefix`` when there is one."""
    if prefix is None:
        return encoded.values()
    return framed(prefix, encoded.buf, encoded.offsets)
