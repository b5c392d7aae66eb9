"""gpu_stage with ``--schema-registry-url`` against a real registry and broker.

Confluent's own deserializer (``AvroDeserializer`` with a ``SchemaRegistryClient``) must decode every
typed record to exactly what the plain path gives for the same raw input, each key once; a registry
that is down at start is waited for, and one that refuses the schema stops the start naming the subject.
"""

from __future__ import annotations

import io
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import schemaless_reader

from llmpipe.kafka_io import KafkaSettings, read_topic
from llmpipe.record import FINGERPRINT_HEADER, TypedRecord
from llmpipe.registry import MAGIC_BYTE, RegistryClient, subject_for, unframe
from stack import registry as local_registry
from stack.procs import free_port
from tests.integration.gpu_stage.conftest import (
    ROOT,
    start_worker,
    typed_topic,
    worker_command,
    write_raw,
)

pytestmark = pytest.mark.integration

RECORD = TypedRecord.from_file()


def run_worker(kafka: KafkaSettings, raw: str, base: str, dlq: str, log: Path, *extra: str) -> None:
    command = [*worker_command(kafka, raw, base, dlq, f"g-{base}", f"t-{base}", idle_s=3.0), *extra]
    proc = start_worker(command, log)
    assert proc.wait(timeout=240) == 0, log.read_text()[-3000:]


def plain_rows(kafka: KafkaSettings, topic: str) -> dict[bytes, dict[str, Any]]:
    rows = {}
    for msg in read_topic(kafka, topic):
        assert msg.key is not None and msg.key not in rows
        rows[msg.key] = schemaless_reader(io.BytesIO(msg.value or b""), RECORD.parsed_avro, None)
    return rows


def test_confluent_deserializer_reads_what_the_plain_path_writes(
    kafka: KafkaSettings, new_topic: Any, schema_registry: str, tmp_path: Path
) -> None:
    raw = new_topic("raw", 3)
    expected = write_raw(kafka, raw, 3_000)
    plain_base, framed_base = new_topic("plainbase"), new_topic("framedbase")
    run_worker(kafka, raw, plain_base, new_topic("dlq"), tmp_path / "plain.log")
    run_worker(kafka, raw, framed_base, new_topic("dlq"), tmp_path / "framed.log",
               "--schema-registry-url", schema_registry)
    framed_topic = typed_topic(framed_base)
    assert f"subject {subject_for(framed_topic)}, schema id" in (tmp_path / "framed.log").read_text()

    with RegistryClient(schema_registry) as client:
        schema_id = client.register(subject_for(framed_topic), RECORD.avro)  # idempotent: the worker's id
        assert client.schema(schema_id) == RECORD.avro
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": schema_registry}))
    context = SerializationContext(framed_topic, MessageField.VALUE)
    framed: dict[bytes, dict[str, Any]] = {}
    for msg in read_topic(kafka, framed_topic):
        value = msg.value or b""
        assert value[0] == MAGIC_BYTE and unframe(value)[0] == schema_id
        assert dict(msg.headers)[FINGERPRINT_HEADER] == RECORD.fingerprint.encode()  # the header stays
        assert msg.key is not None and msg.key not in framed  # every key once
        framed[msg.key] = deserialize(value, context)

    plain = plain_rows(kafka, typed_topic(plain_base))
    assert set(framed) == set(plain) == expected.good
    assert framed == plain


def test_a_registry_down_at_start_is_waited_for(kafka: KafkaSettings, new_topic: Any, tmp_path: Path) -> None:
    raw = new_topic("raw", 1)
    expected = write_raw(kafka, raw, 200)
    base, dlq = new_topic("typedbase"), new_topic("dlq")
    port = free_port()
    url = f"http://127.0.0.1:{port}{local_registry.CCOMPAT_PATH}"
    log = tmp_path / "w.log"
    command = [*worker_command(kafka, raw, base, dlq, f"g-{base}", f"t-{base}", idle_s=3.0),
               "--schema-registry-url", url]
    proc = start_worker(command, log)
    time.sleep(8)  # the worker is waiting: nothing listens on the port yet
    assert proc.poll() is None, log.read_text()[-3000:]
    root = tmp_path / "late-registry"
    local_registry.start(root, port)
    try:
        assert proc.wait(timeout=240) == 0, log.read_text()[-3000:]
        text = log.read_text()
        assert text.count("retrying until it answers") == 1  # one line, not one per attempt
        assert "schema registry answered after" in text
        values = read_topic(kafka, typed_topic(base))
        assert {m.key for m in values} == expected.good
        assert {unframe(m.value or b"")[0] for m in values} == {
            RegistryClient(url).register(subject_for(typed_topic(base)), RECORD.avro)}
    finally:
        local_registry.stop(root)


def test_a_registry_refusing_the_schema_stops_the_start_naming_the_subject(
    kafka: KafkaSettings, new_topic: Any, schema_registry: str, tmp_path: Path
) -> None:
    raw = new_topic("raw", 1)
    base = new_topic("typedbase")
    subject = subject_for(typed_topic(base))
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    answer = httpx.post(f"{schema_registry}/subjects/{subject}/versions", headers=headers,
                        content=json.dumps({"schema": json.dumps({"type": "string"})}))
    assert answer.status_code == 200, answer.text
    answer = httpx.put(f"{schema_registry}/config/{subject}", headers=headers,
                       content=json.dumps({"compatibility": "BACKWARD"}))
    assert answer.status_code == 200, answer.text
    command = [*worker_command(kafka, raw, base, new_topic("dlq"), f"g-{base}", f"t-{base}", idle_s=3.0),
               "--schema-registry-url", schema_registry]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gpu_stage: schema registry") and subject in last and "409" in last, last


def test_the_worker_never_logs_registry_credentials(kafka: KafkaSettings, new_topic: Any, tmp_path: Path) -> None:
    raw = new_topic("raw", 1)
    base = new_topic("typedbase")
    url = f"http://alice:s3cret-pw@127.0.0.1:{free_port()}/apis/ccompat/v6"
    command = [*worker_command(kafka, raw, base, new_topic("dlq"), f"g-{base}", f"t-{base}", idle_s=3.0),
               "--schema-registry-url", url]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        time.sleep(6)
    finally:
        proc.kill()
        out = proc.communicate()[0].decode(errors="replace")
    assert "retrying until it answers" in out
    assert f"schema registry {url.replace('alice:s3cret-pw@', '')} unreachable" in out
    assert "s3cret-pw" not in out
