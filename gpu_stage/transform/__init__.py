"""The transform: a batch of raw vLLM bodies → Avro datums of typed rows, plus dead letters.

Pure: it never talks to Kafka and never reads the clock, so the same batch gives the same bytes
whichever backend runs. One contract, and the implementations that accelerate it::

    contract/    the rules: semantics.md, and the reference backend (Python) that executes them
    avro/        the Avro row encoder that the host-side paths share
    native.py    the native core (Rust, ``llmpipe_native``): the CPU backend, and every row the
                 GPU paths leave
    device/      the device lane: numba kernels, one CUDA thread per body (the GPU default)
    cudf/        the device's memory pool (RMM), and the ``gpu-cudf`` reader path
    gpu.py       the GPU backend: the device lane, or the cuDF path on request
    api.py       Backend, StreamBackend, TransformSettings
    backends.py  choose a backend by name, never silently

Every implementation is tested byte for byte against the reference on the shared vectors
(``tests/vectors``). The worker and the benchmarks use the names exported here.
"""

from gpu_stage.transform.api import (
    DEFAULT_POOL_BYTES,
    DEVICE_WAITS,
    LANE_ORDERS,
    Backend,
    DeviceWait,
    LaneOrder,
    StreamBackend,
    TransformSettings,
)
from gpu_stage.transform.backends import CHOICES, Choice, by_name, choose, gpu_unusable_reason
from gpu_stage.transform.batch import EncodedRows, ParseResult, RawBatch
from gpu_stage.transform.contract.reference import ROW_LAYOUT, ReferenceBackend
from gpu_stage.transform.native import NativeBackend
from gpu_stage.transform.packed import PackedBatch

__all__ = [
    "CHOICES",
    "DEFAULT_POOL_BYTES",
    "DEVICE_WAITS",
    "LANE_ORDERS",
    "ROW_LAYOUT",
    "Backend",
    "Choice",
    "DeviceWait",
    "EncodedRows",
    "LaneOrder",
    "NativeBackend",
    "PackedBatch",
    "ParseResult",
    "RawBatch",
    "ReferenceBackend",
    "StreamBackend",
    "TransformSettings",
    "by_name",
    "choose",
    "gpu_unusable_reason",
]
