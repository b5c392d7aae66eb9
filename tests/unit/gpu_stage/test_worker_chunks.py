"""The worker's chunked parse: chunks parsed on the parse thread, rows enqueued in batch order, no broker."""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

from gpu_stage import synth
from gpu_stage.settings import WorkerSettings
from gpu_stage.transform.api import TransformSettings
from gpu_stage.transform.batch import ParseResult, RawBatch
from gpu_stage.transform.native import NativeBackend
from gpu_stage.worker import STAGES, Worker
from llmpipe.errors import ConfigError, ParseError
from llmpipe.kafka_io import KafkaSettings


class RecordingProducer:
    """Stands in for the transactional producer: keeps what each ``produce_many`` call enqueued."""

    def __init__(self) -> None:
        self.keys: list[list[bytes | None]] = []
        self.partitions: list[list[int] | None] = []

    def produce_many(self, topic: str, values: Any, keys: Any, headers: Any, partitions: Any = None) -> None:
        del topic, headers
        assert len(list(values)) == len(keys)
        self.keys.append(list(keys))
        self.partitions.append(None if partitions is None else list(partitions))


class ThreadNoting:
    """The native backend, noting the thread and the size of every call."""

    def __init__(self) -> None:
        self.inner = NativeBackend(TransformSettings())
        self.calls: list[tuple[str, int]] = []

    @property
    def name(self) -> str:
        return "cpu"

    def parse(self, batch: RawBatch) -> ParseResult:
        self.calls.append((threading.current_thread().name, len(batch)))
        return self.inner.parse(batch)


def _worker(chunk: int, on_bad: str = "dlq") -> tuple[Worker, ThreadNoting, RecordingProducer]:
    worker = Worker.__new__(Worker)  # no consumer or producer: only the parse-and-produce step runs
    worker.settings = WorkerSettings(kafka=KafkaSettings(), parse_chunk_records=chunk, on_bad=on_bad)  # type: ignore[arg-type]
    backend, producer = ThreadNoting(), RecordingProducer()
    worker.backend, worker.producer = backend, producer  # type: ignore[assignment]
    worker.typed_topic, worker._typed_headers = "typed", []
    worker._co_partitioned = frozenset()
    worker._parser = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="parse")
    worker._steps = dict.fromkeys(STAGES, 0.0)
    return worker, backend, producer


def _good_bodies(n: int) -> list[bytes]:
    pool = synth.bodies(2 * n)  # the generator mixes in error bodies: keep the good ones
    bad = {b.offset for b in NativeBackend(TransformSettings()).parse(synth.batch(pool)).bad}
    return [body for i, body in enumerate(pool) if i not in bad][:n]


def _batch(n: int, bad_at: set[int]) -> RawBatch:
    values = [b"{not json" if i in bad_at else body for i, body in enumerate(_good_bodies(n))]
    batch = synth.batch(values)
    return RawBatch(values=batch.values, keys=[f"k{i}".encode() for i in range(n)], headers=batch.headers,
                    topic=batch.topic, partitions=batch.partitions, offsets=batch.offsets,
                    timestamps_ms=batch.timestamps_ms)  # fmt: skip


def test_chunks_are_parsed_on_the_parse_thread_and_enqueued_in_batch_order() -> None:
    batch = _batch(1_000, bad_at={5, 420, 999})
    worker, backend, producer = _worker(chunk=300)
    outcome = worker._parse_and_produce(batch)
    worker._parser.shutdown()

    assert [size for _, size in backend.calls] == [250, 250, 250, 250]
    assert all(name.startswith("parse") for name, _ in backend.calls)
    whole = NativeBackend(TransformSettings()).parse(batch)
    assert [k for chunk in producer.keys for k in chunk] == whole.encoded.keys
    assert outcome.typed == len(whole.encoded) == 997
    assert [b.offset for b in outcome.bad] == [5, 420, 999]
    assert worker._steps["parse"] > 0 and worker._steps["produce"] > 0


def test_no_chunking_parses_the_batch_in_one_call_on_the_calling_thread() -> None:
    worker, backend, producer = _worker(chunk=0)
    outcome = worker._parse_and_produce(_batch(500, bad_at=set()))
    worker._parser.shutdown()
    assert backend.calls == [(threading.current_thread().name, 500)]
    assert len(producer.keys) == 1 and outcome.typed == 500


def test_on_bad_fail_stops_before_enqueueing_the_chunk_with_the_bad_record() -> None:
    worker, backend, producer = _worker(chunk=100, on_bad="fail")
    with pytest.raises(ParseError, match=r"bad record at .*\[0\]@250"):
        worker._parse_and_produce(_batch(400, bad_at={250}))
    worker._parser.shutdown()
    assert [len(keys) for keys in producer.keys] == [100, 100]  # the chunks before it, then it stopped
    assert len(backend.calls) <= 4


def test_co_partitioned_rows_go_to_their_raw_records_partitions() -> None:
    """Each typed row to the partition its raw record came from; by key (no partition) when not co-partitioned."""
    batch = _batch(600, bad_at={7, 300})
    batch = RawBatch(values=batch.values, keys=batch.keys, headers=batch.headers, topic=batch.topic,
                     partitions=[i % 5 for i in range(600)], offsets=batch.offsets,
                     timestamps_ms=batch.timestamps_ms)  # fmt: skip
    worker, _, producer = _worker(chunk=250)
    worker._parse_and_produce(batch)
    worker._co_partitioned = frozenset({"typed"})
    worker._parse_and_produce(batch)
    worker._parser.shutdown()

    assert producer.partitions[:3] == [None, None, None]
    rows = [i for i in range(600) if i not in {7, 300}]
    assert [p for chunk in producer.partitions[3:] for p in chunk or []] == [i % 5 for i in rows]
    assert [k for chunk in producer.keys[3:] for k in chunk] == [f"k{i}".encode() for i in rows]


def test_parsed_rows_are_counted_by_what_parsed_them() -> None:
    """The gpu backend's rows by lane (device, native), any other backend's under its name."""
    from types import SimpleNamespace

    from prometheus_client import REGISTRY

    def count(engine: str) -> float:
        return REGISTRY.get_sample_value("gpu_stage_parsed_rows_total", {"engine": engine}) or 0.0

    worker, backend, _ = _worker(chunk=0)
    before = {engine: count(engine) for engine in ("cpu", "device", "native")}
    worker._timed_parse(_batch(300, bad_at=set()))
    assert count("cpu") - before["cpu"] == 300

    class Split:
        name = "gpu"
        stats = SimpleNamespace(slow_rows=0)

        def parse(self, batch: RawBatch) -> ParseResult:
            self.stats.slow_rows += 40  # the native core took 40 of the batch's rows
            return backend.inner.parse(batch)

    worker.backend = Split()  # type: ignore[assignment]
    worker._timed_parse(_batch(250, bad_at=set()))
    worker._parser.shutdown()
    assert (count("device") - before["device"], count("native") - before["native"]) == (210, 40)


def test_a_rebalance_has_the_partition_counts_checked_again_and_kept_when_unanswered() -> None:
    from types import SimpleNamespace

    from llmpipe.errors import SourceError

    counts = {"raw": 4, "typed": 4, "dlq": 1}
    worker, _, _ = _worker(chunk=0)
    worker._parser.shutdown()
    worker.settings = WorkerSettings(kafka=KafkaSettings(), raw_topic="raw", dlq_topic="dlq")
    worker.consumer = SimpleNamespace(partition_count=counts.get)  # type: ignore[assignment]
    worker._on_assign([])  # inside consume: only noted
    assert worker._partitioning_stale
    worker._recheck_partitioning()
    assert worker._co_partitioned == {"typed"}
    counts["raw"] = 6  # raw grew: its records now go by key
    worker._recheck_partitioning()
    assert worker._co_partitioned == frozenset()

    def unanswered(topic: str) -> int:
        raise SourceError(topic)

    counts["raw"], worker._co_partitioned = 4, frozenset({"typed"})
    worker.consumer = SimpleNamespace(partition_count=unanswered)  # type: ignore[assignment]
    worker._recheck_partitioning()
    assert worker._co_partitioned == {"typed"}
    worker.settings = WorkerSettings(kafka=KafkaSettings(), partition_by="key")
    worker.consumer = SimpleNamespace(partition_count=counts.get)  # type: ignore[assignment]
    worker._recheck_partitioning()
    assert worker._co_partitioned == frozenset()


def test_partition_by_and_gpu_min_batch_options(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_stage.settings import parse

    assert parse([])[1].partition_by == "source"
    assert parse(["--partition-by", "key"])[1].partition_by == "key"
    assert parse([])[1].gpu_min_batch == 2000
    assert parse(["--gpu-min-batch", "0"])[1].gpu_min_batch == 0
    monkeypatch.setenv("GPU_STAGE_GPU_MIN_BATCH", "1500")
    assert parse([])[1].gpu_min_batch == 1500
    with pytest.raises(ConfigError, match="gpu-min-batch"):
        parse(["--gpu-min-batch", "-1"])
    with pytest.raises(SystemExit):
        parse(["--partition-by", "random"])


@pytest.mark.parametrize("side", ["reader", "writer"])
def test_kafka_client_options(side: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_stage.settings import parse

    field = f"kafka_{side}"
    assert getattr(parse([])[1], field) == "packed"
    assert getattr(parse([f"--kafka-{side}", "objects"])[1], field) == "objects"
    monkeypatch.setenv(f"GPU_STAGE_KAFKA_{side.upper()}", "objects")
    assert getattr(parse([])[1], field) == "objects"
    with pytest.raises(SystemExit) as stop:
        parse([f"--kafka-{side}", "rows"])
    assert stop.value.code == 2
    assert f"--kafka-{side}" in capsys.readouterr().err


def test_kernel_cache_and_chunk_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from gpu_stage.settings import parse

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert parse([])[1].kernel_cache == tmp_path / "llmpipe" / "kernels"
    assert parse(["--kernel-cache", ""])[1].kernel_cache is None
    assert parse(["--kernel-cache", "/srv/k"])[1].kernel_cache == Path("/srv/k")
    monkeypatch.setenv("GPU_STAGE_KERNEL_CACHE", "/from/env")
    assert parse([])[1].kernel_cache == Path("/from/env")
    assert parse([])[1].parse_chunk_records == 10_000
    assert parse(["--parse-chunk-records", "0"])[1].parse_chunk_records == 0
    with pytest.raises(ConfigError, match="parse-chunk-records"):
        parse(["--parse-chunk-records", "-1"])


def test_native_threads_option_reaches_the_lanes_native_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset: every usable core; set (option or env): that many; the lane's native core gets it."""
    from gpu_stage.runtime import usable_cores
    from gpu_stage.settings import parse
    from gpu_stage.transform.device.executor import CpuExecutor
    from gpu_stage.transform.device.lane import LaneTransform

    assert parse([])[1].native_threads is None
    assert parse(["--native-threads", "3"])[1].native_threads == 3
    monkeypatch.setenv("GPU_STAGE_NATIVE_THREADS", "2")
    assert parse([])[1].native_threads == 2
    with pytest.raises(ConfigError, match="native-threads"):
        parse(["--native-threads", "0"])
    assert LaneTransform(TransformSettings(native_threads=3), CpuExecutor).native.threads == 3
    assert LaneTransform(TransformSettings(), CpuExecutor).native.threads == usable_cores()


def test_warm_up_records_default_to_what_one_parse_call_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_stage.settings import parse

    assert parse([])[1].warm_up_batch == 10_000
    assert parse(["--batch-records", "5000"])[1].warm_up_batch == 5000
    assert parse(["--parse-chunk-records", "0", "--batch-records", "30000"])[1].warm_up_batch == 30_000
    assert parse(["--warm-up-records", "0"])[1].warm_up_batch == 0
    monkeypatch.setenv("GPU_STAGE_WARM_UP_RECORDS", "123")
    assert parse([])[1].warm_up_batch == 123
    with pytest.raises(ConfigError, match="warm-up-records"):
        parse(["--warm-up-records", "-1"])


class _Counted:
    """The native core, with each parse call's batch size and each counter reset recorded."""

    name = "native"

    def __init__(self) -> None:
        self.native = NativeBackend(TransformSettings())
        self.sizes: list[int] = []
        self.resets = 0

    def parse(self, batch: RawBatch) -> ParseResult:
        self.sizes.append(len(batch))
        return self.native.parse(batch)

    def reset_counters(self) -> None:
        self.resets += 1


def test_warm_up_parses_a_generated_batch_twice_then_resets_the_counters() -> None:
    from gpu_stage.runtime import warm_up

    backend = _Counted()
    assert warm_up(backend, 0) == 0.0
    assert (backend.sizes, backend.resets) == ([], 0)
    assert warm_up(backend, 700) > 0
    assert (backend.sizes, backend.resets) == ([700, 700], 1)
    # A backend with no counters to reset is warmed all the same.
    plain = NativeBackend(TransformSettings())
    assert warm_up(plain, 50) > 0
