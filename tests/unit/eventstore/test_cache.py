"""Cache: LRU bound, TTL expiry, newer versions win."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from app.eventstore import Cache, Codec, Decider, EventStore, MemoryStreamStorage, RollingState
from app.eventstore.cache import CacheEntry


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def entry(version: int, at: float = 0.0) -> CacheEntry:
    return CacheEntry(state=version, version=version, etag=f"e{version}", tip=None, stored_at_s=at)


def test_least_recently_used_entry_goes_first() -> None:
    cache = Cache(max_entries=2, ttl_s=10, clock=Clock())
    cache.put("c", "a", entry(1))
    cache.put("c", "b", entry(1))
    assert cache.get("c", "a") is not None  # a is now most recent
    cache.put("c", "c", entry(1))
    assert cache.get("c", "b") is None and cache.get("c", "a") is not None and len(cache) == 2


def test_entries_expire_after_ttl() -> None:
    clock = Clock()
    cache = Cache(max_entries=5, ttl_s=10, clock=clock)
    cache.put("c", "a", entry(1, at=0.0))
    clock.now_s = 9.9
    assert cache.get("c", "a") is not None
    clock.now_s = 10.1
    assert cache.get("c", "a") is None and len(cache) == 0


def test_an_older_version_never_replaces_a_newer_one_and_categories_do_not_mix() -> None:
    cache = Cache(clock=Clock())
    cache.put("c", "a", entry(5))
    cache.put("c", "a", entry(3))
    hit = cache.get("c", "a")
    assert hit is not None and hit.version == 5
    assert cache.get("other", "a") is None


@pytest.mark.parametrize(("max_entries", "ttl_s"), [(0, 1.0), (1, 0.0)])
def test_bad_bounds_are_refused(max_entries: int, ttl_s: float) -> None:
    with pytest.raises(ValueError):
        Cache(max_entries=max_entries, ttl_s=ttl_s)


@dataclass(frozen=True)
class Count:
    n: int


def test_a_slow_load_never_replaces_what_a_write_cached_meanwhile() -> None:
    """RollingState's version never moves, so the version guard alone let a load that read the tip
    before a write land its older state over the write's: stale reads and `assume_cached`
    decisions then saw Count(1) after Count(2) was written."""

    class Delayed(MemoryStreamStorage):
        """The next tip read answers only once `gate` is set (its body read before the write)."""

        gate: asyncio.Event | None = None

        async def read_tip(self, stream, known):  # type: ignore[no-untyped-def]
            tip = await super().read_tip(stream, known)
            gate, self.gate = self.gate, None
            if gate is not None:
                await gate.wait()
            return tip

    async def scenario() -> None:
        storage, cache = Delayed(), Cache()
        decider: Decider[None, Count, Count] = Decider(
            initial=Count(0), evolve=lambda s, e: e, unfold=lambda s: [s], is_origin=lambda e: True
        )
        category = EventStore(storage).category(
            "C", decider, Codec(Count), access=RollingState(), cache=cache
        )
        await category.decide("s", lambda s: (None, [Count(1)]))
        gate = storage.gate = asyncio.Event()
        slow = asyncio.create_task(category.load("s"))
        await asyncio.sleep(0)  # the slow load has read Count(1)
        await category.decide("s", lambda s: (None, [Count(2)]))
        gate.set()
        await slow
        entry = cache.get("C", "s")
        assert entry is not None and entry.state == Count(2)
        assert (await category.load("s", allow_stale_s=60)).state == Count(2)
        assert await category.decide("s", lambda s: (s, []), assume_cached=True) == Count(2)

    asyncio.run(scenario())
