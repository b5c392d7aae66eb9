"""Which records of one input partition are read, finished, committed, and where its position is.

Requests finish out of order. Each finished record is committed in the next transaction, whatever
is still running before it; the partition's position (the offset a restart reads from) advances
only over the contiguous prefix of committed records. The committed records ahead of the position
are this window's ``done`` set, written with the position in the same transaction (see
:mod:`connector.progress`) so that a restart skips them. The pending window (records read but not
behind the position) bounds the memory and the size of that set.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from connector.progress import Progress

T = TypeVar("T")


@dataclass(slots=True)
class Window(Generic[T]):
    """Offsets of one partition that are read and not yet behind its committed position."""

    order: deque[int] = field(default_factory=deque)
    """Registered offsets, increasing (gaps such as transaction markers are fine)."""
    results: dict[int, T] = field(default_factory=dict)
    """Finished, not yet committed."""
    done: set[int] = field(default_factory=set)
    """Committed (now or by an earlier run), still ahead of the position."""
    ahead: set[int] = field(default_factory=set)
    """Committed by an earlier run and not read yet: kept in every progress written until they are,
    or a crash before they are read again would forget them and call them a second time."""

    def register(self, offset: int, *, done: bool = False) -> None:
        """Remember an offset as read; ``done`` when an earlier run already committed its output."""
        if self.order and offset <= self.order[-1]:
            msg = f"offset {offset} not after {self.order[-1]}"
            raise ValueError(msg)
        self.order.append(offset)
        if done or offset in self.ahead:
            self.done.add(offset)
        self.ahead.discard(offset)

    def complete(self, offset: int, result: T) -> None:
        """Store the result of a registered offset."""
        self.results[offset] = result

    def finished(self, limit: int) -> list[tuple[int, T]]:
        """Up to ``limit`` finished, uncommitted results, lowest offsets first. Nothing is removed."""
        if not self.results:
            return []
        return [(offset, self.results[offset]) for offset in sorted(self.results)[:limit]]

    def has_work(self) -> bool:
        """True when a commit would change something: results to write, or done records to pass."""
        return bool(self.results) or (bool(self.order) and self.order[0] in self.done)

    def progress_after(self, offsets: Iterable[int]) -> Progress | None:
        """The progress once ``offsets`` are committed; None when nothing is registered."""
        if not self.order:
            return None
        done = self.done.union(offsets)
        position = self.order[-1] + 1
        for offset in self.order:
            if offset not in done:
                position = offset
                break
        return Progress(position, frozenset(o for o in done | self.ahead if o >= position))

    def commit(self, offsets: Iterable[int]) -> int:
        """Mark ``offsets`` committed and pass the position over the done prefix; how many it passed."""
        for offset in offsets:
            self.results.pop(offset, None)
            self.done.add(offset)
        passed = 0
        while self.order and self.order[0] in self.done:
            self.done.discard(self.order.popleft())
            passed += 1
        return passed

    def __len__(self) -> int:
        return len(self.order)
