"""Which input offsets may be committed: the contiguous prefix of finished records, per partition.

Requests finish out of order. A record is committed (its output produced and its offset sent) only
when every record read before it on the same partition has finished too, so each transaction covers
exactly a contiguous range of input and a restart from the committed offset neither skips nor repeats
output. Results past a gap wait in memory; the pending window bounds how many.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class PrefixTracker(Generic[T]):
    """Offsets of one partition in read order, and the results of those that finished."""

    order: deque[int] = field(default_factory=deque)
    results: dict[int, T] = field(default_factory=dict)

    def register(self, offset: int) -> None:
        """Remember an offset as read; offsets must increase (gaps, e.g. txn markers, are fine)."""
        if self.order and offset <= self.order[-1]:
            msg = f"offset {offset} not after {self.order[-1]}"
            raise ValueError(msg)
        self.order.append(offset)

    def complete(self, offset: int, result: T) -> None:
        """Store the result of a registered offset."""
        self.results[offset] = result

    def ready(self, limit: int | None = None) -> tuple[list[T], int | None]:
        """Results of the finished prefix (up to ``limit``) and the next offset to commit after them.

        Nothing is removed: call :meth:`release` once the transaction holding them has committed.
        """
        out: list[T] = []
        last: int | None = None
        for offset in self.order:
            if offset not in self.results or (limit is not None and len(out) >= limit):
                break
            out.append(self.results[offset])
            last = offset
        return out, None if last is None else last + 1

    def release(self, count: int) -> None:
        """Forget the first ``count`` offsets (they are committed)."""
        for _ in range(count):
            self.results.pop(self.order.popleft(), None)

    def __len__(self) -> int:
        return len(self.order)
