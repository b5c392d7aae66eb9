"""Type stubs of the native transform core (see ``gpu_stage/transform/native.py``)."""

from collections.abc import Buffer, Callable, Sequence

class Transform:
    """The transform compiled for one Avro record schema and one content JSON Schema."""

    def __init__(self, avro_schema: str, content_schema: str, max_record_bytes: int) -> None: ...
    def run(
        self,
        values: list[bytes],
        keys: list[bytes | None],
        headers: list[Sequence[tuple[str, bytes | None]]],
        partitions: bytes,
        offsets: bytes,
        timestamps_ms: bytes,
        threads: int = 1,
    ) -> tuple[bytes, bytes, bytes, list[tuple[int, str, str]]]: ...
    def lane_input(
        self,
        values: list[bytes],
        keys: list[bytes | None],
        headers: list[Sequence[tuple[str, bytes | None]]],
        out: Buffer,
    ) -> tuple[bytes, bytes, bytes, bytes, bytes, bytes] | int: ...
    def run_packed(
        self, columns: tuple[Buffer, ...], positions: Buffer | None = None, threads: int = 1
    ) -> tuple[
        bytes,
        bytes,
        bytes,
        list[tuple[int, str, str]],
    ]: ...
    def start_packed(
        self, columns: tuple[Buffer, ...], positions: Buffer | None = None, threads: int = 1
    ) -> PackedRun: ...

class PackedRun:
    """``Transform.run_packed`` running on native threads; ``result()`` helps finish it and returns it (once)."""

    @property
    def seconds(self) -> float | None: ...
    @property
    def helped(self) -> int: ...
    def result(
        self,
    ) -> tuple[
        bytes,
        bytes,
        bytes,
        list[tuple[int, str, str]],
    ]: ...

def check_packed(columns: tuple[Buffer, ...]) -> None: ...
def copy_into(src: Buffer, dst: Buffer) -> None: ...
def place(dst: Buffer, src: Buffer, src_ends: Buffer, starts: Buffer) -> None: ...
def headers_at(buf: Buffer, ends: Buffer, i: int) -> list[tuple[str, bytes | None]]: ...
def records_at(
    columns: tuple[Buffer, ...], positions: Buffer
) -> list[tuple[bytes, bytes | None, list[tuple[str, bytes | None]], int, int]]: ...
def lane_offsets(
    sizes: Buffer,
    rest_rows: Buffer,
    rest_ends: Buffer,
    rows: Buffer,
    offsets: Buffer,
    starts: Buffer,
    rest_starts: Buffer,
) -> int: ...

class KafkaReader:
    def __init__(
        self, config: dict[str, str], topics: list[str], on_rebalance: Callable[[str, list[tuple[str, int]]], None]
    ) -> None: ...
    def consume(self, max_records: int, max_bytes: int, timeout_s: float) -> list[bytes] | None: ...
    def take_logs(self) -> tuple[list[tuple[int, str, str]], int]: ...
    def assignment(self) -> list[tuple[str, int]]: ...
    def committed(self, parts: list[tuple[str, int]], timeout_s: float) -> list[tuple[str, int, int]]: ...
    def positions(self) -> list[tuple[str, int, int]]: ...
    def seek(self, parts: list[tuple[str, int, int]], timeout_s: float) -> None: ...
    def watermarks(self, topic: str, partition: int, timeout_s: float, cached: bool) -> tuple[int, int]: ...
    def partition_count(self, topic: str, timeout_s: float) -> int | None: ...
    def group_metadata(self) -> bytes: ...
    def close(self) -> None: ...
