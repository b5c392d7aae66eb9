"""An input partition's committed progress: the position, and the requests done ahead of it.

Responses finish out of order and each one is committed as soon as it finishes, so a partition's
progress is not one offset but two facts written in the same transaction as the outputs:

- ``next``: every offset before it is done (the consumer-group offset, or a file's line count);
- ``done``: offsets at or after ``next`` whose outputs are already committed.

A restart resumes reading at ``next`` and skips the offsets in ``done``, so no request is called
again once its output is committed. ``done`` holds at most the connector's pending window, and is
stored as ranges, which keeps the record small when most of the window is finished.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from llmpipe.errors import SourceError


@dataclass(frozen=True, slots=True)
class Progress:
    """Committed progress of one input partition."""

    next: int
    done: frozenset[int] = frozenset()

    def encode(self) -> bytes:
        """The state record's value: ``{"next": N, "done": [[first, last], ...]}``."""
        return orjson.dumps({"next": self.next, "done": ranges(self.done)})

    @classmethod
    def decode(cls, value: bytes) -> Progress:
        """Read a state record (``next_line`` is the file position's older spelling)."""
        try:
            doc = orjson.loads(value)
            position = int(doc["next"] if "next" in doc else doc["next_line"])
            done = frozenset(o for first, last in doc.get("done", []) for o in range(int(first), int(last) + 1))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            msg = f"unreadable connector state record {value[:200]!r}: {exc}"
            raise SourceError(msg) from exc
        return cls(position, frozenset(o for o in done if o >= position))


def ranges(offsets: Iterable[int]) -> list[list[int]]:
    """Sorted offsets as inclusive ``[first, last]`` runs."""
    out: list[list[int]] = []
    for offset in sorted(offsets):
        if out and out[-1][1] == offset - 1:
            out[-1][1] = offset
        else:
            out.append([offset, offset])
    return out
