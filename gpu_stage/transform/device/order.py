"""Which row each of the lane's threads takes: rows sorted by length, side by side or dealt round the warps.

The idea: were a warp's 32 threads to step together, with one thread per body a warp would walk as
long as its longest body, and with bodies of mixed lengths (a tail of long ones, 200 B to 20 KB in
one batch) nearly every warp would hold one of the long ones. On real bodies they seldom step
together (each body's fields come in their own order and length), so the measured effect is the
opposite: see the end of this text. The ordered kernels
of :mod:`gpu_stage.transform.device.rows` take row ``order[t]`` in thread ``t``; these kernels make
``order`` (the lane's ``length`` and ``balanced`` settings). Each row gets its body's length class
(:func:`length_class`, a quarter octave), then a counting sort puts the rows of each segment in
class order in that segment's own span of ``order``: one segment, the whole batch, for pass 1; for
pass 2 one per output piece (its rows, from the row whose datum starts the piece), so that a
piece's launch has its own rows, of like lengths, side by side. A segment's bounds are row
numbers, ascending from 0 (``bounds[k]`` to ``bounds[k + 1]``).

Rows of one class take their places by atomic increments, so on the device their order within a
class varies from run to run; the output does not, every row being written at its own offset.
With ``arrival`` no order is made and thread ``t`` takes row ``t``. On an H200, warps of like
lengths (``length``) walked the bench's mixed bodies (400 B to 32 KB) more slowly than warps of the
rows as they came, in both passes, and real-shaped bodies at 0.48x of them: sorted, the long
bodies' warps hold nothing but long bodies.

``balanced``, the lane's default (``TransformSettings.lane_order``), deals the sorted rows out
instead (:func:`deal_rows`): a warp's threads seldom step together on real bodies (each body's
fields come in their own order and length), so a warp takes about the sum of its bodies' walks
rather than its longest, and a batch waits on its heaviest warps. Dealt round the warps like cards,
forth and back, each warp takes one row from each stretch of like lengths, so every warp holds about
the same bytes. On an H100 it walked real-shaped bodies at 1.15x of ``arrival`` (both passes
shorter) and generated ~1 KB bodies, all of about one length, at 0.96x to 1.01x.

Same source for CUDA and the CPU (see :mod:`gpu_stage.transform.device.scan`).
"""

# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from typing import Any

if "LANES" not in globals():  # a plain import; compile_lane runs the sources in order, jitted
    from gpu_stage.transform.device.warp import LANES


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)
kernel: Any = globals().get("kernel", _plain)
lane_start: Any = globals().get("lane_start", _plain)
lane_step: Any = globals().get("lane_step", _plain)
atomic_add: Any = globals().get("atomic_add", _plain)

SMALLEST_OCTAVE = 5
"""Bodies shorter than ``2 ** SMALLEST_OCTAVE`` bytes share class 0."""
CLASSES = 64
"""Length classes: four per octave from 32 bytes up; the last one also holds every body of 2 MiB
and more (a body over the lane's size limit is not walked at all)."""
WARP = LANES
"""Threads of a warp (:data:`gpu_stage.transform.device.warp.LANES`): the unit :func:`deal_rows` balances."""
WHOLE_BATCH = (0, 1 << 62)
"""Segment bounds of a single segment holding every row of a batch (pass 1's)."""


@jit
def length_class(length):
    """The quarter octave of ``length``: its highest bit and the two bits below it, 4 classes per octave.

    Monotonic in ``length``; the bodies of one class differ in length by at most a quarter of the shortest.
    """
    if length < (1 << SMALLEST_OCTAVE):
        return 0
    top = SMALLEST_OCTAVE
    while top < SMALLEST_OCTAVE + CLASSES // 4 and (length >> (top + 1)) > 0:
        top += 1
    if top == SMALLEST_OCTAVE + CLASSES // 4:
        return CLASSES - 1
    return 4 * (top - SMALLEST_OCTAVE) + ((length >> (top - 2)) & 3)


@jit
def segment_of(bounds, r):
    """The segment holding row ``r``: the ``k`` with ``bounds[k] <= r < bounds[k + 1]`` (a binary search)."""
    lo = 0
    hi = bounds.shape[0] - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if bounds[mid] <= r:
            lo = mid
        else:
            hi = mid
    return lo


@kernel
def length_classes(vends, classes, counts):
    """Each row's body length class, and the rows of each class counted into ``counts`` (0 before)."""
    r = lane_start()
    step = lane_step()
    while r < classes.shape[0]:
        s = vends[r - 1] if r > 0 else 0
        c = length_class(vends[r] - s)
        classes[r] = c
        atomic_add(counts, c, 1)
        r += step


@kernel
def count_classes(classes, bounds, counts):
    """The rows of each segment's each class counted into ``counts[segment * CLASSES + class]`` (0 before)."""
    r = lane_start()
    step = lane_step()
    while r < classes.shape[0]:
        atomic_add(counts, segment_of(bounds, r) * CLASSES + classes[r], 1)
        r += step


@kernel
def class_starts(bounds, counts, cursors):
    """Where each segment's classes start in ``order``: after its segment's start, the rows of its classes before.

    One thread per segment. ``counts`` are left 0, as the next batch's counting needs them.
    """
    k = lane_start()
    step = lane_step()
    while k < bounds.shape[0] - 1:
        at = bounds[k]
        for c in range(CLASSES):
            i = k * CLASSES + c
            cursors[i] = at
            at += counts[i]
            counts[i] = 0
        k += step


@kernel
def place_rows(classes, bounds, cursors, order):
    """Each row at the next place of its segment's class in ``order`` (``cursors`` from :func:`class_starts`)."""
    r = lane_start()
    step = lane_step()
    while r < classes.shape[0]:
        at = atomic_add(cursors, segment_of(bounds, r) * CLASSES + classes[r], 1)
        order[at] = r
        r += step


@jit
def dealt_slot(i, m):
    """The thread, within its segment of ``m`` sorted rows, that takes the ``i``-th of them (``balanced``).

    The ``m % WARP`` first (shortest) rows fill the last, partial warp; the rest are dealt round the
    ``W = m // WARP`` full warps, one round per stretch of ``W`` like ranks, every other round from
    the last warp back, so that no warp takes the longest of each stretch. A permutation of ``0 … m - 1``.
    """
    full = m // WARP
    rest = m - full * WARP
    if i < rest:
        return full * WARP + i
    j = i - rest
    turn = j // full
    warp = j - turn * full
    if turn % 2 == 1:
        warp = full - 1 - warp
    return warp * WARP + turn


@kernel
def deal_rows(sorted_rows, bounds, order):
    """``sorted_rows`` (by class, per segment) dealt into ``order``: each row at its segment's :func:`dealt_slot`."""
    p = lane_start()
    step = lane_step()
    n = sorted_rows.shape[0]
    while p < n:
        k = segment_of(bounds, p)
        first = bounds[k]
        end = min(bounds[k + 1], n)
        order[first + dealt_slot(p - first, end - first)] = sorted_rows[p]
        p += step
