"""The device memory the device lane holds for a stream of batches, known before it starts.

Each slot (``TransformSettings.lane_slots``) keeps a batch's bytes four times over: the block the
batch is copied into, the strings pass's marks (two bytes a byte) and its decoded copy. It keeps,
per row, the walk's value slots, the content's four columns of the schema's properties, the record
columns, a few row buffers and pass 2's spans. Across slots, pass 2 writes through two output
buffers, each as large as a batch's output (one piece by default), which is counted as large as the
batch. On an H100, 100 k real-shaped bodies (129 MB) in three slots held 2.08 GB; :func:`lane_bytes`
gives 2.08 GB for them too. Importing this module needs no GPU.
"""

from __future__ import annotations

from gpu_stage.transform.device.slots import SLOT_COUNT, SPANS, span_columns
from llmpipe.errors import ConfigError

BYTE_COPIES = 4
"""A batch's bytes in each slot: the block, the marks (two bytes a byte) and the decoded copy."""
ROW_BUFFER_BYTES = 96
"""Per row and slot besides the value and content slots: the record columns in the block (ends,
partitions, offsets, timestamps, the key null flags), the sizes, the row order and its classes,
pass 2's starts."""
OUTPUTS = 2
"""Pass 2's output buffers, each counted as large as a batch: ``cuda.OUT_BUFFERS`` is this number
(defined here, where no GPU is needed to read it)."""


def lane_bytes(batch_bytes: int, batch_records: int, slots: int, nprops: int) -> int:
    """Device bytes the lane holds for batches of up to ``batch_bytes`` and ``batch_records`` in ``slots`` slots."""
    row_bytes = 8 * SLOT_COUNT + 4 * 8 * max(nprops, 1) + ROW_BUFFER_BYTES + 8 * span_columns(SPANS)
    per_slot = BYTE_COPIES * batch_bytes + row_bytes * batch_records
    return slots * per_slot + OUTPUTS * batch_bytes


def check_lane_fits(batch_bytes: int, batch_records: int, slots: int, nprops: int, pool_bytes: int) -> None:
    """Refuse, in one line, batches whose lane buffers would not fit the GPU memory pool.

    Found at start rather than when the first large batch fails to allocate, and named by the
    options that set each side.
    """
    needed = lane_bytes(batch_bytes, batch_records, slots, nprops)
    if needed <= pool_bytes:
        return
    msg = (
        f"--batch-bytes {batch_bytes} and {batch_records} records a parse call (--batch-records, "
        f"--parse-chunk-records) in --lane-slots {slots} need about "
        f"{needed / 2**30:.2f} GiB of device memory, more than --gpu-pool-bytes {pool_bytes} "
        f"({pool_bytes / 2**30:.2f} GiB): lower --batch-bytes or --lane-slots (2 to 4), or raise --gpu-pool-bytes"
    )
    raise ConfigError(msg)
