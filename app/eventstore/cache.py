"""An in-process cache of loaded streams: state, version and etag (plus the tip it came from).

Bounded by ``max_entries`` (least recently used goes first) and ``ttl_s`` (an entry older than
that is dropped on access). Share one Cache between the categories of a process; keys include
the category name so states of different categories never mix.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.eventstore.model import TipDocument

__all__ = ["Cache", "CacheEntry"]


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """What a load established: the folded state at ``version`` from the tip with ``etag``."""

    state: Any
    version: int
    etag: str | None
    tip: TipDocument | None
    stored_at_s: float


class Cache:
    """LRU + TTL cache of CacheEntry keyed by (category, stream)."""

    def __init__(
        self, max_entries: int = 10_000, ttl_s: float = 300.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], CacheEntry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def now_s(self) -> float:
        return self._clock()

    def get(self, category: str, stream: str) -> CacheEntry | None:
        key = (category, stream)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() - entry.stored_at_s > self.ttl_s:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def put(self, category: str, stream: str, entry: CacheEntry) -> None:
        key = (category, stream)
        current = self._entries.get(key)
        # Never let a slower concurrent load replace a newer state.
        if current is not None and current.version > entry.version:
            return
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def put_loaded(
        self, category: str, stream: str, entry: CacheEntry, started_from: CacheEntry | None
    ) -> None:
        """A load's result, where the load began from `started_from` (the entry it found, or None).
        Something stored meanwhile (a write's state, another load) is kept unless the load reached
        a higher version: versions alone cannot order entries of equal version (RollingState's
        never moves), and a write that landed while the load was in flight is the newer."""
        current = self._entries.get((category, stream))
        if current is not None and current is not started_from and current.version >= entry.version:
            return
        self.put(category, stream, entry)

    def invalidate(self, category: str, stream: str) -> None:
        self._entries.pop((category, stream), None)
