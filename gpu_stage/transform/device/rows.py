"""The device lane's kernels: the strings pass (:func:`mark`), pass 1 (:func:`measure`) and pass 2 (:func:`write`).

Each takes one thread per body. :func:`mark` marks a body's strings and decodes them into ``dec``
(:mod:`gpu_stage.transform.device.strings`); it is a kernel of its own, launched just before pass 1
in the same row order, because it needs few registers and so keeps more warps resident to hide its
byte loads than pass 1 could (on an H100 the lane ran 1.03 to 1.04 times as fast as with the same
code inside pass 1).
Pass 1 (:func:`measure_row`) walks the body once (:mod:`gpu_stage.transform.device.walk`),
checks its content (:mod:`gpu_stage.transform.device.content`) and returns the row's encoded size, or
:data:`NOT_TAKEN` when the lane does not take the body. The values stay as they came; ``dec`` holds
every string decoded and the tool arguments rewritten. Pass 2 (:func:`write`) writes the datum at
its offset from the slots and ``dec`` (:mod:`gpu_stage.transform.device.emit`).
Thread ``t`` takes row ``t``, or in :func:`measure_ordered` and :func:`write_ordered` row
``order[t]``, a permutation of the rows (:mod:`gpu_stage.transform.device.order`: rows of like length
side by side); each row's results go to places of its own, so the order changes no byte.

Of the dead letters the lane finds those whose text is a constant: upstream error bodies
(:data:`UPSTREAM_ERROR`), and bodies that are not UTF-8, not JSON or not an object (from the strict
check of :mod:`gpu_stage.transform.device.strict`). Everything else, every other dead letter
included, is :data:`NOT_TAKEN` and done by the native core.

Same source for CUDA and the CPU (see :mod:`gpu_stage.transform.device.scan`).
"""

# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

from typing import Any

if "skip_ws" not in globals():  # a plain import; compile_lane runs the sources in order, jitted
    from gpu_stage.transform.device.content import (
        content_state,
    )
    from gpu_stage.transform.device.emit import (
        copy_row_spans,
        emit,
    )
    from gpu_stage.transform.device.record import (
        record_columns,
    )
    from gpu_stage.transform.device.scan import LANE_STEPS
    from gpu_stage.transform.device.slots import (
        CONTENT,
        CONTENT_STATE,
        NOT_TAKEN,
        UPSTREAM_ERROR,
    )
    from gpu_stage.transform.device.strict import (
        V_UNKNOWN,
        body_verdict,
    )
    from gpu_stage.transform.device.strings import (
        mark_strings,
    )
    from gpu_stage.transform.device.walk import (
        body,
        error_body,
    )
    from gpu_stage.transform.device.warp import mark_strings_steps


def _plain(fn: Any) -> Any:
    return fn


jit: Any = globals().get("jit", _plain)
kernel: Any = globals().get("kernel", _plain)
lane_start: Any = globals().get("lane_start", _plain)
lane_step: Any = globals().get("lane_step", _plain)

@jit
def measure_row(
    b,
    marks,
    dec,
    vends,
    kb,
    kends,
    knull,
    hb,
    hends,
    max_bytes,
    slots,
    r,
    ptab,
    pnames,
    pends,
    nprops,
    required,
    closed_schema,
    pmin,
    pmax,
    enames,
    eends,
    cs,
    ce,
    cv,
    cd,
    parts,
    offs,
    tss,
):
    """Pass 1 for row ``r``: its encoded size, ``NOT_TAKEN``, or a dead letter's code (``UPSTREAM_ERROR`` and below)."""
    s = vends[r - 1] if r > 0 else 0
    e = vends[r]
    if e - s > max_bytes:
        return NOT_TAKEN
    if not body(b, marks, s, e, slots, r, dec):
        if error_body(b, marks, s, e):
            return UPSTREAM_ERROR
        verdict = body_verdict(b, marks, s, e)
        return NOT_TAKEN if verdict == V_UNKNOWN else UPSTREAM_ERROR - verdict
    if not record_columns(kb, kends, knull, hb, hends, slots, r):
        return -1
    c = slots[r, CONTENT]
    if c >= 0:
        length = slots[r, CONTENT + 2]
        state = content_state(
            dec,
            c,
            c + length,
            ptab,
            pnames,
            pends,
            nprops,
            required,
            closed_schema,
            pmin,
            pmax,
            enames,
            eends,
            slots,
            r,
            cs,
            ce,
            cv,
            cd,
        )
        if state < 0:
            return NOT_TAKEN
        slots[r, CONTENT_STATE] = state
    return emit(
        dec,
        kb,
        hb,
        slots,
        r,
        ptab,
        pnames,
        pends,
        nprops,
        cs,
        ce,
        cv,
        cd,
        parts[r],
        offs[r],
        tss[r],
        dec,  # the size pass writes nothing
        0,
        False,
        slots,  # and leaves no spans
    )


@kernel
def mark(b, marks, dec, vends, max_bytes, count):
    """Each row's strings marked and decoded before pass 1: thread ``t`` (a warp, in the warp build) on row ``t``.

    The executors run the warp build's (:func:`gpu_stage.transform.device.warp.mark_strings_steps`)
    whatever pass 1's order: a warp takes its row 32 bytes at a step, so a row's length holds back
    no other row and no order is asked for.
    """
    r = lane_start()
    step = lane_step()
    while r < count:
        s = vends[r - 1] if r > 0 else 0
        e = vends[r]
        if e - s <= max_bytes:
            if LANE_STEPS:
                mark_strings_steps(b, marks, dec, s, e)
            else:
                mark_strings(b, marks, dec, s, e)
        r += step


@kernel
def measure(
    b,
    marks,
    dec,
    vends,
    kb,
    kends,
    knull,
    hb,
    hends,
    max_bytes,
    slots,
    ptab,
    pnames,
    pends,
    nprops,
    required,
    closed_schema,
    pmin,
    pmax,
    enames,
    eends,
    cs,
    ce,
    cv,
    cd,
    parts,
    offs,
    tss,
    sizes,
):
    """Pass 1 over every row (one thread per row on the device, a loop on the CPU), the rows as they came."""
    r = lane_start()
    step = lane_step()
    while r < sizes.shape[0]:
        sizes[r] = measure_row(
            b,
            marks,
            dec,
            vends,
            kb,
            kends,
            knull,
            hb,
            hends,
            max_bytes,
            slots,
            r,
            ptab,
            pnames,
            pends,
            nprops,
            required,
            closed_schema,
            pmin,
            pmax,
            enames,
            eends,
            cs,
            ce,
            cv,
            cd,
            parts,
            offs,
            tss,
        )
        r += step


@kernel
def measure_ordered(
    b,
    marks,
    dec,
    vends,
    kb,
    kends,
    knull,
    hb,
    hends,
    max_bytes,
    slots,
    ptab,
    pnames,
    pends,
    nprops,
    required,
    closed_schema,
    pmin,
    pmax,
    enames,
    eends,
    cs,
    ce,
    cv,
    cd,
    parts,
    offs,
    tss,
    sizes,
    order,
):
    """:func:`measure` with thread ``t`` on row ``order[t]``, a permutation of the rows."""
    t = lane_start()
    step = lane_step()
    while t < sizes.shape[0]:
        r = order[t]
        sizes[r] = measure_row(
            b,
            marks,
            dec,
            vends,
            kb,
            kends,
            knull,
            hb,
            hends,
            max_bytes,
            slots,
            r,
            ptab,
            pnames,
            pends,
            nprops,
            required,
            closed_schema,
            pmin,
            pmax,
            enames,
            eends,
            cs,
            ce,
            cv,
            cd,
            parts,
            offs,
            tss,
        )
        t += step


@kernel
def write(
    b, kb, hb, slots, ptab, pnames, pends, nprops, cs, ce, cv, cd, parts, offs, tss, starts, first, last, lo, hi, out,
    spans,
):  # fmt: skip
    """Pass 2: each taken row of ``[first, last)`` whose datum starts in ``[lo, hi)`` written at ``starts[r] - lo``.

    ``starts[r]`` is -1 where the row is not taken (nothing written). The bounds let the output be
    written in pieces, through a device buffer the size of a piece, each launch over the rows that
    may start in it. A row's long strings are left to ``spans`` where it has columns for them, for
    :func:`copy_spans` to copy after this launch.
    """
    r = first + lane_start()
    step = lane_step()
    while r < last:
        q = starts[r]
        if q >= lo and q < hi:
            spans[r, 0] = 0
            emit(
                b,
                kb,
                hb,
                slots,
                r,
                ptab,
                pnames,
                pends,
                nprops,
                cs,
                ce,
                cv,
                cd,
                parts[r],
                offs[r],
                tss[r],
                out,
                q - lo,
                True,
                spans,
            )
        r += step


@kernel
def write_ordered(
    b, kb, hb, slots, ptab, pnames, pends, nprops, cs, ce, cv, cd, parts, offs, tss, starts, order, first, last, lo,
    hi, out, spans,
):  # fmt: skip
    """:func:`write` with thread ``t`` on row ``order[first + t]``: ``order[first:last]`` holds the rows."""
    t = first + lane_start()
    step = lane_step()
    while t < last:
        r = order[t]
        q = starts[r]
        if q >= lo and q < hi:
            spans[r, 0] = 0
            emit(
                b,
                kb,
                hb,
                slots,
                r,
                ptab,
                pnames,
                pends,
                nprops,
                cs,
                ce,
                cv,
                cd,
                parts[r],
                offs[r],
                tss[r],
                out,
                q - lo,
                True,
                spans,
            )
        t += step


@kernel
def copy_spans(dec, spans, starts, first, last, lo, hi, out):
    """After pass 2's launch over the same rows and piece: the strings it left to spans (a warp a row, on the device).

    The rows are as they came: a warp copies its row's strings 32 bytes a step, so no row's length
    holds back another's. Only rows whose datum starts in ``[lo, hi)`` were written by that launch,
    and so only their spans are this batch's.
    """
    r = first + lane_start()
    step = lane_step()
    while r < last:
        q = starts[r]
        if q >= lo and q < hi:
            copy_row_spans(dec, spans, r, out)
        r += step
