"""Which offsets of a partition may be committed, and which keys may run now. Pure.

Records of one partition are handed out in offset order and finish in any order (keys run
concurrently); the committable offset is the first one not finished, so a restart redelivers
only unfinished work. Per ordering key, one record runs at a time, the others wait in order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["KeyLanes", "OffsetTracker", "partition_shares"]

T = TypeVar("T")


class OffsetTracker:
    """Offsets of one partition: read (handed out) in increasing order, finished in any order."""

    def __init__(self, start: int) -> None:
        self._next = start  # the offset after the last one read
        self._open: deque[int] = deque()  # read and not finished, increasing
        self._finished: set[int] = set()  # finished, but an earlier one is still open

    def read(self, offset: int) -> None:
        if offset < self._next:
            raise ValueError(f"offset {offset} read after {self._next - 1}")
        self._open.append(offset)
        self._next = offset + 1

    def finish(self, offset: int) -> None:
        if self._open and self._open[0] == offset:
            self._open.popleft()
            while self._open and self._open[0] in self._finished:
                self._finished.discard(self._open.popleft())
        else:
            self._finished.add(offset)

    @property
    def next_offset(self) -> int:
        """The offset after the last one read."""
        return self._next

    @property
    def committable(self) -> int:
        """Everything below this offset is finished (or was never there: compaction, markers)."""
        return self._open[0] if self._open else self._next

    @property
    def open(self) -> int:
        """Read and not finished."""
        return len(self._open) - len(self._finished)


K = TypeVar("K", bound=Hashable)


class KeyLanes(Generic[K, T]):
    """One lane per ordering key: `add` says whether the item may start now (its lane was idle),
    `done` hands out the next item waiting in that lane (or None: the lane is idle again)."""

    def __init__(self) -> None:
        self._waiting: dict[K, deque[T]] = {}

    def add(self, key: K, item: T) -> bool:
        lane = self._waiting.get(key)
        if lane is None:
            self._waiting[key] = deque()
            return True
        lane.append(item)
        return False

    def done(self, key: K) -> T | None:
        lane = self._waiting[key]
        if lane:
            return lane.popleft()
        del self._waiting[key]
        return None

    def drop(self, keys: set[K]) -> int:
        """Forget these lanes (their partition was revoked); returns the items dropped."""
        dropped = 0
        for key in keys & self._waiting.keys():
            dropped += len(self._waiting.pop(key))
        return dropped

    def any_of(self, partitions: set[int]) -> bool:
        """Whether a lane of these partitions is busy (keys are `(partition, key)` tuples)."""
        return any(key[0] in partitions for key in self._waiting)  # type: ignore[index]

    @property
    def busy(self) -> int:
        return len(self._waiting)


def partition_shares(total: int, partitions: int) -> list[int]:
    """A global in-flight limit split over partitions: shares sum to `total` exactly, so copies
    owning disjoint partitions never exceed it together."""
    base, extra = divmod(total, partitions)
    return [base + (1 if p < extra else 0) for p in range(partitions)]
