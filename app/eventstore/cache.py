"""An in-process cache of loaded streams: state, version and etag (plus the tip it came from).

Bounded by ``max_entries`` (least recently used goes first) and ``ttl_s``: with ``sliding`` (the
default, Equinox's SlidingWindow) an entry not used for that long is dropped on access; without,
an entry stored that long ago is (FixedTimeSpan). Share one Cache between the categories of a
process; keys include the category name so states of different categories never mix.
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
        self,
        max_entries: int = 10_000,
        ttl_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        *,
        sliding: bool = True,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        self.sliding = sliding
        self._entries: OrderedDict[tuple[str, str], CacheEntry] = OrderedDict()
        self._used_at: dict[tuple[str, str], float] = {}  # last get or put, for the sliding window

    def __len__(self) -> int:
        return len(self._entries)

    def now_s(self) -> float:
        return self._clock()

    def get(self, category: str, stream: str) -> CacheEntry | None:
        key = (category, stream)
        entry = self._entries.get(key)
        if entry is None:
            return None
        now = self._clock()
        since = self._used_at.get(key, entry.stored_at_s) if self.sliding else entry.stored_at_s
        if now - since > self.ttl_s:
            del self._entries[key]
            self._used_at.pop(key, None)
            return None
        self._entries.move_to_end(key)
        self._used_at[key] = now
        return entry

    def put(self, category: str, stream: str, entry: CacheEntry) -> None:
        key = (category, stream)
        current = self._entries.get(key)
        # Never let a slower concurrent load replace a newer state.
        if current is not None and current.version > entry.version:
            return
        self._entries[key] = entry
        self._entries.move_to_end(key)
        self._used_at[key] = self._clock()
        while len(self._entries) > self.max_entries:
            oldest, _ = self._entries.popitem(last=False)
            self._used_at.pop(oldest, None)

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
        self._used_at.pop((category, stream), None)
