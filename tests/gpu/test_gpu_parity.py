"""GPU tier: the GPU backend against the CPU reference, byte for byte (skipped without a usable GPU).

Both device paths run every test: the device lane (the default) and the cuDF reader path.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import escape_corpus, real_corpus
from gpu_stage.synth import SynthConfig, batch, bodies
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.batch import ParseResult, RawBatch
from gpu_stage.transform.contract.reference import ReferenceBackend
from gpu_stage.transform.native import NativeBackend
from tests.gpu.gpu_parity import CORPUS, REASON, assert_same, first_difference
from tests.vectors import batch_of, load_vectors

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"no usable GPU: {REASON}")]

SYNTH_RECORDS = 100_000
SYNTH_BATCH = 10_000
REAL_RECORDS = 100_000
ESCAPE_RECORDS = 100_000


@pytest.fixture(scope="module")
def cpu() -> ReferenceBackend:
    return ReferenceBackend(TransformSettings())


@pytest.fixture(scope="module", params=["kernel", "cudf"])
def gpu(request: pytest.FixtureRequest) -> Any:
    from gpu_stage.transform.gpu import GpuBackend

    backend = GpuBackend(TransformSettings(), pool_bytes=8 << 30, lane=request.param)
    assert (backend.lane is not None) == (request.param == "kernel"), "the device lane did not start"
    return backend


def check(cpu: ReferenceBackend, gpu: Any, raw: RawBatch) -> None:
    matches(cpu.parse(raw), gpu.parse(raw))


def matches(expected: ParseResult, result: ParseResult) -> None:
    """``result`` byte for byte the reference's ``expected``; the first differing row named on failure."""
    assert first_difference(expected, result) is None
    assert_same(expected, result)


def test_all_vectors_in_one_batch(cpu: ReferenceBackend, gpu: Any) -> None:
    check(cpu, gpu, batch_of(load_vectors()))


@pytest.mark.parametrize("vector", load_vectors(), ids=lambda v: v.name)
def test_each_vector_alone(cpu: ReferenceBackend, gpu: Any, vector: Any) -> None:
    check(cpu, gpu, batch_of([vector]))


def test_good_vectors_in_one_batch(cpu: ReferenceBackend, gpu: Any) -> None:
    check(cpu, gpu, batch_of([v for v in load_vectors() if "fields" in v.expect]))


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus folder {CORPUS} is absent")
def test_real_corpus_as_sent_and_compacted(cpu: ReferenceBackend, gpu: Any) -> None:
    values = [p.read_bytes() for p in sorted(CORPUS.glob("*.json"))]
    assert values
    check(cpu, gpu, RawBatch.of_values(values))
    check(cpu, gpu, RawBatch.of_values([orjson.dumps(orjson.loads(v)) for v in values]))


@pytest.fixture(scope="module")
def native() -> NativeBackend:
    return NativeBackend(TransformSettings())


def check_in_batches(cpu: ReferenceBackend, gpu: Any, native: NativeBackend, values: list[bytes]) -> None:
    """``values`` in batches of ``SYNTH_BATCH``, each compared whole: reference, native core and GPU."""
    for start in range(0, len(values), SYNTH_BATCH):
        raw = batch(values[start : start + SYNTH_BATCH], first_offset=start)
        expected = cpu.parse(raw)
        matches(expected, gpu.parse(raw))
        matches(expected, native.parse(raw))


@pytest.fixture(scope="module")
def real_values() -> list[bytes]:
    return real_corpus.generate(REAL_RECORDS).values


@pytest.fixture(scope="module")
def escape_values() -> list[bytes]:
    return escape_corpus.escape_bodies(ESCAPE_RECORDS).values


def test_real_shaped_corpus(
    cpu: ReferenceBackend, gpu: Any, native: NativeBackend, real_values: list[bytes]
) -> None:
    """The benchmark's default corpus: every kind of body real vLLM traffic holds, in its share."""
    check_in_batches(cpu, gpu, native, real_values)


def test_random_escape_bodies(
    cpu: ReferenceBackend, gpu: Any, native: NativeBackend, escape_values: list[bytes]
) -> None:
    """Every JSON escape at random in every string, at the body's level and in the JSON held in strings."""
    check_in_batches(cpu, gpu, native, escape_values)


def test_empty_batch(cpu: ReferenceBackend, gpu: Any) -> None:
    check(cpu, gpu, RawBatch.of_values([]))


def test_all_null_and_all_bad_batches(cpu: ReferenceBackend, gpu: Any) -> None:
    check(cpu, gpu, RawBatch.of_values([b"null"] * 5))
    check(cpu, gpu, RawBatch.of_values([b"{}", b"{", b"", b"[1]", b'{"id":1}', b"\xff", b'{"error":"x"}']))


def test_synth_bodies(cpu: ReferenceBackend, gpu: Any) -> None:
    values = bodies(SYNTH_RECORDS, SynthConfig())
    cpu_hash, gpu_hash = hashlib.sha256(), hashlib.sha256()
    gpu.reset_counters()  # the module's backend also ran the vector tests: count this run alone
    mismatched, good, bad = 0, 0, 0
    seconds = {"cpu": 0.0, "gpu": 0.0}
    for start in range(0, SYNTH_RECORDS, SYNTH_BATCH):
        raw = batch(values[start : start + SYNTH_BATCH], first_offset=start)
        t0 = time.perf_counter()
        a = cpu.parse(raw)
        t1 = time.perf_counter()
        b = gpu.parse(raw)
        seconds["gpu"] += time.perf_counter() - t1
        seconds["cpu"] += t1 - t0
        cpu_hash.update(a.encoded.buf)
        gpu_hash.update(b.encoded.buf)
        mismatched += first_difference(a, b) is not None
        good, bad = good + len(a.encoded), bad + len(a.bad)
    slow = gpu.stats.slow_rows
    report = {
        "records": SYNTH_RECORDS, "batch_size": SYNTH_BATCH, "seed": SynthConfig().seed, "good": good, "bad": bad,
        "batches_with_differences": mismatched, "cpu_output_sha256": cpu_hash.hexdigest(),
        "gpu_output_sha256": gpu_hash.hexdigest(), "identical": cpu_hash.digest() == gpu_hash.digest(),
        "slow_lane_rows": slow, "slow_lane_fraction": round(slow / gpu.stats.rows, 4),
        "whole_batch_fallbacks": gpu.stats.slow_batches, "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "gpu_stage_seconds": gpu.clock.rounded(),
    }  # fmt: skip
    report["path"] = "device lane" if gpu.lane is not None else "cudf reader"
    out = os.environ.get("GPU_PARITY_OUT")
    if out:
        path = Path(out)
        path = path if gpu.lane is not None else path.with_name(path.stem + "-cudf" + path.suffix)
        path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    assert mismatched == 0, report
    assert report["identical"], report
