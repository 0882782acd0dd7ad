"""Equinox's Custom access strategy: `transmute(events, state)` picks the events a write stores and
the unfolds it writes with them; `is_origin` says where a load may start."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.eventstore import Cache, Custom, EventStore, EventStoreConfigError, MemoryStreamStorage, StoreOptions

from . import favorites as fav

NOW = datetime(2024, 5, 1, tzinfo=UTC)


KEEP_REMOVALS = Custom(is_origin=fav.is_origin, transmute=fav.keep_removals)
COMMANDS: list[fav.Command] = [
    fav.Add(1, "a", NOW),
    fav.Add(2, "b", NOW),
    fav.Remove(1),
    fav.Add(3, "c", NOW),
    fav.Remove(3),
    fav.Add(4, "d", NOW),
]


def _store(max_events: int = 2) -> tuple[MemoryStreamStorage, EventStore]:
    storage = MemoryStreamStorage(page_size=2)
    return storage, EventStore(storage, StoreOptions(max_events_in_tip=max_events))


async def test_only_the_transmuted_events_are_stored_and_a_load_starts_from_the_unfold() -> None:
    _, store = _store()
    writer = store.category("Favorites", fav.DECIDER, fav.CODEC, KEEP_REMOVALS, Cache())
    for command in COMMANDS:
        await writer.transact("Favorites-x", command)
    stored = [event for _, event in await writer.read_events("Favorites-x")]
    assert stored == [fav.Removed(1), fav.Removed(3)]
    fresh = await store.category("Favorites", fav.DECIDER, fav.CODEC, KEEP_REMOVALS).load("Favorites-x")
    assert [x.id for x in fresh.state] == [4, 2]
    assert fresh.version == 2, "the version counts the stored events"


async def test_a_cached_reader_catches_up_through_the_unfolds_not_the_stored_events() -> None:
    """A reader whose cache is one write behind must not fold just the events stored since: the
    dropped ones live only in the unfold (the path Snapshot readers take would miss the Adds)."""
    _, store = _store(max_events=10)
    reader = store.category("Favorites", fav.DECIDER, fav.CODEC, KEEP_REMOVALS, Cache())
    writer = store.category("Favorites", fav.DECIDER, fav.CODEC, KEEP_REMOVALS)
    await writer.transact("Favorites-y", fav.Add(1, "a", NOW))
    assert [x.id for x in (await reader.load("Favorites-y")).state] == [1]
    await writer.transact("Favorites-y", fav.Add(2, "b", NOW))
    await writer.transact("Favorites-y", fav.Remove(1))
    assert [x.id for x in (await reader.load("Favorites-y")).state] == [2]


async def test_a_transmute_that_drops_every_event_orders_writes_by_the_tip_alone() -> None:
    _, store = _store()
    rolling = Custom(is_origin=fav.is_origin, transmute=lambda events, state: ([], [fav.Compacted(state)]))
    writer = store.category("Favorites", fav.DECIDER, fav.CODEC, rolling, Cache())
    for command in COMMANDS:
        await writer.transact("Favorites-z", command)
    loaded = await store.category("Favorites", fav.DECIDER, fav.CODEC, rolling).load("Favorites-z")
    assert ([x.id for x in loaded.state], loaded.version) == ([4, 2], 0)
    assert await writer.read_events("Favorites-z") == []


def test_a_strategy_of_another_kind_is_refused() -> None:
    _, store = _store()
    with pytest.raises(EventStoreConfigError, match="unknown access strategy"):
        store.category("Favorites", fav.DECIDER, fav.CODEC, object(), Cache())  # type: ignore[arg-type]
