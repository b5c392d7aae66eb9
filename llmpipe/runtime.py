"""Process-wide tuning shared by the long-running stages (each calls it once from ``main``)."""

from __future__ import annotations

import gc


def tune_gc(gen0_threshold: int) -> None:
    """Freeze what start-up allocated; run the cyclic collector every ``gen0_threshold`` allocations.

    CPython's default is 700. The stages allocate many short-lived, acyclic objects per record;
    reference counting frees those at once, so memory stays bounded while the collector stops
    rescanning survivors thousands of times. Start-up garbage is collected first so that freezing
    keeps only live objects.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)
