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


def test_entries_expire_a_ttl_after_they_were_stored_with_a_fixed_window() -> None:
    clock = Clock()
    cache = Cache(max_entries=5, ttl_s=10, clock=clock, sliding=False)
    cache.put("c", "a", entry(1, at=0.0))
    clock.now_s = 9.9
    assert cache.get("c", "a") is not None
    clock.now_s = 10.1
    assert cache.get("c", "a") is None and len(cache) == 0


def test_entries_expire_a_ttl_after_their_last_use_with_a_sliding_window() -> None:
    """Equinox's SlidingWindow (the default): a stream read often stays cached; an idle one goes."""
    clock = Clock()
    cache = Cache(max_entries=5, ttl_s=10, clock=clock)
    cache.put("c", "a", entry(1, at=0.0))
    for now in (9.0, 18.0, 27.0):  # each read within the window keeps it
        clock.now_s = now
        assert cache.get("c", "a") is not None
    clock.now_s = 37.1  # idle for more than the window
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


async def test_loads_that_allow_staleness_share_a_load_in_flight_and_others_read() -> None:
    """Equinox's AllowStale: concurrent loads of one stream that accept a stale state merge into the
    load already reading; a load that does not accept it reads for itself."""

    class Gated(MemoryStreamStorage):
        reads = 0
        gate: asyncio.Event | None = None

        async def read_tip(self, stream, known):  # type: ignore[no-untyped-def]
            self.reads += 1
            if self.gate is not None:
                await self.gate.wait()
            return await super().read_tip(stream, known)

    storage = Gated()
    decider: Decider[None, Count, Count] = Decider(
        initial=Count(0), evolve=lambda s, e: e, unfold=lambda s: [s], is_origin=lambda e: True
    )
    category = EventStore(storage).category("C", decider, Codec(Count), access=RollingState(), cache=Cache())
    await category.decide("s", lambda s: (None, [Count(7)]))
    storage.reads, storage.gate = 0, asyncio.Event()
    category._cache.invalidate("C", "s")  # type: ignore[union-attr]  # nothing cached: every load reads
    stale = [asyncio.create_task(category.load("s", allow_stale_s=30)) for _ in range(5)]
    strict = asyncio.create_task(category.load("s"))
    await asyncio.sleep(0)
    assert storage.reads == 2  # the first stale-allowing load, and the strict one
    storage.gate.set()
    loaded = await asyncio.gather(*stale, strict)
    assert {x.state for x in loaded} == {Count(7)} and storage.reads == 2
