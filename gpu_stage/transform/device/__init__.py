"""The device lane: raw bodies → Avro datums in two kernel passes, one CUDA thread per body.

Host side: ``lane`` (:class:`LaneTransform`: a batch through the lane plus the native core for the
bodies it leaves), ``packed`` (batches in a stream, a few in flight), ``cuda`` (the CUDA executor),
``executor`` (the executor interface and the CPU one the tests use), ``columns``, ``tables``,
``merge``, ``kernels`` (compiles the kernel sources), ``launch`` (kernel launch without numba's
per-call overhead).

Kernel sources, in the order ``kernels`` executes them into one namespace per target: ``scan``
(lenient JSON scanning), ``strict`` (strict verdicts), ``record`` (key and header columns),
``slots`` (the row layout), ``walk`` (the body walk), ``content`` (the content schema check),
``emit`` (the Avro writer), ``rows`` (the two kernels). They are executed rather than imported so
that the same source compiles with ``numba.cuda.jit`` for the device and ``numba.njit`` for the
CPU, where the tests compare the lane byte for byte with the native core.
"""

from gpu_stage.transform.device.executor import CpuExecutor
from gpu_stage.transform.device.lane import CpuLaneBackend, LaneTransform
from gpu_stage.transform.device.merge import LaneFound
from gpu_stage.transform.device.slots import NOT_TAKEN

__all__ = ["NOT_TAKEN", "CpuExecutor", "CpuLaneBackend", "LaneFound", "LaneTransform"]
