"""Run the top-level coroutine of a process on uvloop when it is installed.

uvloop's C event loop and transports cost a fraction of asyncio's selector loop per socket read and
write, which is most of what the simulator and the connector do per request on a small machine.
``LLMPIPE_EVENT_LOOP=asyncio`` keeps the standard loop (for comparison or debugging).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The uvloop constructor, or None for the standard loop (not installed, or not wanted)."""
    if os.environ.get("LLMPIPE_EVENT_LOOP", "uvloop") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def loop_name() -> str:
    """The loop :func:`run` will use, for start-up log lines and benchmark records."""
    return "asyncio" if loop_factory() is None else "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the chosen loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
