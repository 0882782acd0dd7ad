"""Cache: LRU bound, TTL expiry, newer versions win."""

from __future__ import annotations

import pytest

from app.eventstore import Cache
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
