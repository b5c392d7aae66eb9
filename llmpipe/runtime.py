"""Process-wide tuning shared by the long-running stages (each calls it once from ``main``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging


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


M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def keep_large_buffers(threshold_bytes: int) -> bool:
    """Let glibc serve allocations up to ``threshold_bytes`` from the heap and keep freed memory.

    glibc maps every allocation above its mmap threshold (at most 32 MiB) afresh and unmaps it on
    free, so a process that builds one 100 MB buffer per batch takes a page fault for every 4 KiB of
    every batch (on the GPU lane's merge, a 100,000-record batch: 43 ms, 10 ms after this call). With a
    higher threshold those buffers reuse the heap; the resident size stays near the largest batch.
    Returns False where the C library is not glibc (nothing changed).
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, threshold_bytes)) and bool(mallopt(M_TRIM_THRESHOLD, 2 * threshold_bytes))


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def configure_logging(spec: str) -> None:
    """Logging for the whole process from ``LEVEL`` or ``LEVEL,logger=LEVEL,…``.

    The first level is the root's; each ``logger=LEVEL`` sets one logger, so one module can speak at
    DEBUG (``INFO,gpu_stage.worker=DEBUG``: a line per batch) without every library doing so.
    A level that logging does not know is a ``ValueError``.
    """
    root, named = logging_levels(spec)
    logging.basicConfig(level=root, format=LOG_FORMAT)
    for name, level in named.items():
        logging.getLogger(name).setLevel(level)


def logging_levels(spec: str) -> tuple[int, dict[str, int]]:
    """The root's level and each named logger's from ``LEVEL,logger=LEVEL,…`` (``ValueError`` if malformed).

    :func:`logging_spec` runs it as an argparse ``type``, so a bad spec is a usage error at start.
    """
    parts = [part.strip() for part in spec.split(",") if part.strip()]
    if not parts:
        msg = "empty logging spec"
        raise ValueError(msg)
    named = {}
    for pair in parts[1:]:
        name, sep, level = pair.partition("=")
        if not sep or not name.strip():
            msg = f"expected logger=LEVEL, got {pair!r}"
            raise ValueError(msg)
        named[name.strip()] = _level(level)
    return _level(parts[0]), named


def logging_spec(spec: str) -> str:
    """``spec`` itself once :func:`logging_levels` accepts it (an argparse ``type``)."""
    logging_levels(spec)
    return spec


def _level(name: str) -> int:
    level = logging.getLevelName(name.strip().upper())
    if not isinstance(level, int):
        msg = f"unknown logging level {name!r}"
        raise ValueError(msg)
    return level
