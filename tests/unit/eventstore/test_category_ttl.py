"""A category's time to live: every document of its streams carries Cosmos DB's per-item `ttl`, so
a stream ends that long after its last write, and a calved batch that long after it was calved
(as if pruned) while loads go on from the tip. Expiry as the store does it, on a clock of the
test's (`MemoryStreamStorage.expire_items`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.eventstore import (
    Cache,
    EventStore,
    EventStoreConfigError,
    MemoryStreamStorage,
    Snapshot,
    StoreOptions,
    Unoptimized,
)

from . import favorites as fav

NOW = datetime(2024, 5, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_stream_of_a_category_with_a_ttl_ends_that_long_after_its_last_write() -> None:
    clock = Clock()
    storage = MemoryStreamStorage(clock=clock)
    store = EventStore(storage, StoreOptions(max_events_in_tip=2))
    favorites = store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache(), ttl_s=60)
    for k in range(3):  # the third write calves the first two events into a batch
        await favorites.transact("Favorites-x", fav.Add(k, "x", NOW))
    assert {body["ttl"] for body in storage.documents.values()} == {60}
    assert ("Favorites-x", "0") in storage.documents

    clock.now += 40
    await favorites.transact("Favorites-x", fav.Add(3, "x", NOW))  # rewrites the tip only
    clock.now += 30  # the batch is 70 s old, the tip 30 s
    assert storage.expire_items() == 1
    assert ("Favorites-x", "0") not in storage.documents
    fresh = store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), ttl_s=60)
    loaded = await fresh.load("Favorites-x")
    assert sorted(x.id for x in loaded.state) == [0, 1, 2, 3] and loaded.version == 4

    clock.now += 60  # no write for a minute: the stream has ended
    assert storage.expire_items() == 1 and not storage.documents
    assert (await fresh.load("Favorites-x")).state == ()


async def test_documents_of_a_category_without_a_ttl_never_expire() -> None:
    clock = Clock()
    storage = MemoryStreamStorage(clock=clock)
    store = EventStore(storage, StoreOptions(max_events_in_tip=2))
    favorites = store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot())
    for k in range(3):
        await favorites.transact("Favorites-y", fav.Add(k, "x", NOW))
    clock.now += 10**9
    assert storage.expire_items() == 0
    assert all("ttl" not in body for body in storage.documents.values())


@pytest.mark.parametrize("ttl_s", [0, -5, 1.5, True])
def test_a_ttl_that_is_not_a_whole_positive_number_of_seconds_is_refused(ttl_s: object) -> None:
    store = EventStore(MemoryStreamStorage())
    with pytest.raises(EventStoreConfigError, match="whole number of seconds"):
        store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), ttl_s=ttl_s)  # type: ignore[arg-type]


def test_unoptimized_access_refuses_a_ttl_since_its_loads_need_every_batch() -> None:
    store = EventStore(MemoryStreamStorage())
    with pytest.raises(EventStoreConfigError, match="Unoptimized"):
        store.category("Favorites", fav.DECIDER, fav.CODEC, Unoptimized(), ttl_s=60)
