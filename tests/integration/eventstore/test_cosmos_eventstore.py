"""The event store on the real (embedded) Cosmos endpoint: conflicts, crashes, bad documents."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from app.cosmos import CosmosStore
from app.crashpoints import InjectedFault, armed
from app.eventstore import (
    Cache,
    CorruptStream,
    CosmosEventStore,
    Custom,
    EventStore,
    Snapshot,
    StoreOptions,
    UnknownEventCase,
    Unoptimized,
    open_event_store,
)
from app.eventstore.cache import CacheEntry
from app.eventstore.model import TIP_ID, BatchDocument, EncodedUnfold, TipDocument
from tests.unit.eventstore import favorites as fav

pytestmark = pytest.mark.integration

NOW = datetime(2024, 5, 1, tzinfo=UTC)


async def store_on(cosmos: CosmosStore, unique: str, **options: Any) -> CosmosEventStore:
    return await open_event_store(cosmos, container=f"es-{unique}", options=StoreOptions(**options))


async def test_ten_concurrent_favorites_writers_apply_every_decision_exactly_once(
    cosmos: CosmosStore, unique: str
) -> None:
    store = await store_on(cosmos, unique, max_events_in_tip=4)
    stream = f"Favorites-{unique}"
    writers = [store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache()) for _ in range(10)]
    # Each writer adds its own item, then all ten race to add item 0 (idempotent: added once).
    await asyncio.gather(*(w.transact(stream, fav.Add(k + 1, f"n{k}", NOW)) for k, w in enumerate(writers)))
    await asyncio.gather(*(w.transact(stream, fav.Add(0, "shared", NOW)) for w in writers))
    stored = await writers[0].read_events(stream)
    assert [index for index, _ in stored] == list(range(11))
    assert sorted(e.item.id for _, e in stored if isinstance(e, fav.Added)) == list(range(11))
    store.stats.reset()
    loaded = await store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot()).load(stream)
    assert loaded.state == fav.DECIDER.fold((), (e for _, e in stored)) and loaded.version == 11
    assert store.stats.requests == 1  # one point read of the tip, whatever the stream length


class CountingEvolve:
    def __init__(self) -> None:
        self.calls = 0

    def decider(self) -> Any:
        def evolve(state: fav.State, event: fav.Event) -> fav.State:
            self.calls += 1
            return fav.evolve(state, event)

        return replace(fav.DECIDER, evolve=evolve)


async def test_seed_worked_example_reaches_state5_every_way(cosmos: CosmosStore, unique: str) -> None:
    store = await store_on(cosmos, unique)
    stream = f"Fav-{unique}"
    events: list[fav.Event] = [
        fav.Added(fav.Item(1, "a", NOW)),
        fav.Added(fav.Item(2, "b", NOW)),
        fav.Removed(1),
        fav.Added(fav.Item(3, "c", NOW)),
        fav.Added(fav.Item(4, "d", NOW)),
    ]
    encoded = [fav.CODEC.encode(e) for e in events]
    state4, state5 = fav.DECIDER.fold((), events[:4]), fav.DECIDER.fold((), events)
    container = store.cosmos_storage.container
    for i in range(4):
        await container.create_item(BatchDocument(stream, i, (encoded[i],)).to_json())
    unfolds = (
        EncodedUnfold(5, fav.CODEC.encode(fav.Compacted(state5))),
        EncodedUnfold(4, fav.CODEC.encode(fav.Compacted(state4))),
    )
    tip_body = TipDocument(stream, 4, (encoded[4],), unfolds).to_json(compress_min_bytes=1)
    assert all(u["z"] == 1 for u in tip_body["u"])  # compressed and flagged
    etag = (await container.create_item(tip_body))["_etag"]

    ways: dict[str, tuple[Any, int, int]] = {}
    for label, access in (("fold initial [all events]", Unoptimized()), ("fold initial [S1 s5]", Snapshot())):
        counting = CountingEvolve()
        cache = Cache()
        cat = store.category("Fav", counting.decider(), fav.CODEC, access, cache)
        store.stats.reset()
        loaded = await cat.load(stream)
        ways[label] = (loaded.state, counting.calls, store.stats.requests)
        assert loaded.version == 5 and loaded.etag == etag
        if label == "fold initial [S1 s5]":
            counting.calls = 0
            store.stats.reset()
            again = await cat.load(stream)  # cached state5 + unchanged etag: fold nothing
            ways["state5 (etag unchanged)"] = (again.state, counting.calls, store.stats.requests)

    counting = CountingEvolve()
    cache = Cache()
    stale_tip = TipDocument(stream, 4, (), (), '"older"')
    cache.put("Fav", stream, CacheEntry(state4, 4, '"older"', stale_tip, cache.now_s()))
    store.stats.reset()
    loaded = await store.category("Fav", counting.decider(), fav.CODEC, Snapshot(), cache).load(stream)
    ways["fold state4 [C3 d5]"] = (loaded.state, counting.calls, store.stats.requests)

    assert {label: way[0] for label, way in ways.items()} == dict.fromkeys(ways, state5)
    assert ways["fold initial [all events]"][1:] == (5, 2)  # five folds; tip read + one query page
    assert ways["fold initial [S1 s5]"][1:] == (1, 1)  # one unfold; one point read
    assert ways["state5 (etag unchanged)"][1:] == (0, 1)  # nothing folded
    assert ways["fold state4 [C3 d5]"][1:] == (1, 1)  # one event folded onto the cached state


async def test_writer_dying_between_calved_batch_and_tip_loses_and_duplicates_nothing(
    cosmos: CosmosStore, unique: str
) -> None:
    store = await store_on(cosmos, unique, max_events_in_tip=3)
    stream = f"Favorites-{unique}"
    healthy = store.category("Favorites", fav.DECIDER, fav.CODEC, Unoptimized())
    for k in range(3):
        await healthy.transact(stream, fav.Add(k, "before", NOW))
    # The fourth event calves the tip's three into batch "0"; the writer dies before the tip says so.
    with armed("eventstore.tip.replace"), pytest.raises(InjectedFault):
        await healthy.transact(stream, fav.Add(50, "never committed", NOW))
    orphan = await store.cosmos_storage.container.read_item("0", partition_key=stream)
    assert orphan["n"] == 3  # the calved batch exists, but the tip still starts at 0
    assert [i for i, _ in await healthy.read_events(stream)] == [0, 1, 2]

    # A writer with a larger tip merges two events first (tip [0, 5)), so the next writer that
    # calves at id "0" must grow the orphan from n=3 to n=5 (If-Match on the orphan's etag).
    wide = EventStore(store.cosmos_storage, StoreOptions(max_events_in_tip=10)).category(
        "Favorites", fav.DECIDER, fav.CODEC, Unoptimized()
    )
    for k in range(3, 5):
        await wide.transact(stream, fav.Add(k, "merged", NOW))
    # The next writer calves at the same id (growing the orphan fails once, and is decided again),
    # then keeps going.
    with armed("eventstore.batch.grow") as grow:
        with pytest.raises(InjectedFault):
            await healthy.transact(stream, fav.Add(5, "after", NOW))
        for k in range(5, 10):
            await healthy.transact(stream, fav.Add(k, "after", NOW))
    assert grow.fired
    grown = await store.cosmos_storage.container.read_item("0", partition_key=stream)
    assert grown["n"] == 5
    stored = await healthy.read_events(stream)
    assert [i for i, _ in stored] == list(range(10))
    assert [e.item.id for _, e in stored if isinstance(e, fav.Added)] == list(range(10))
    fresh = await store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot()).load(stream)
    assert sorted(x.id for x in fresh.state) == list(range(10))


@pytest.mark.parametrize(
    "point", ["eventstore.tip.create", "eventstore.tip.replace", "eventstore.batch.create"]
)
async def test_a_write_failed_at_its_point_and_decided_again_loses_and_duplicates_nothing(
    cosmos: CosmosStore, unique: str, point: str
) -> None:
    """Ten decisions on a stream whose tip calves every three events; the first write at `point`
    fails (the stream's first tip, its first replace, its first calved batch), and the writer,
    restarted, decides again: every event is stored once, in order."""
    store = await store_on(cosmos, unique, max_events_in_tip=3)
    stream = f"Favorites-{unique}"
    failed = 0
    with armed(point) as trigger:
        for k in range(10):
            try:
                await store.category("Favorites", fav.DECIDER, fav.CODEC, Unoptimized()).transact(
                    stream, fav.Add(k, "x", NOW)
                )
            except InjectedFault:
                failed += 1
                restarted = store.category("Favorites", fav.DECIDER, fav.CODEC, Unoptimized())
                await restarted.transact(stream, fav.Add(k, "x", NOW))
    assert trigger.fired and failed == 1
    stored = await store.category("Favorites", fav.DECIDER, fav.CODEC, Unoptimized()).read_events(stream)
    assert [i for i, _ in stored] == list(range(10))
    assert [e.item.id for _, e in stored if isinstance(e, fav.Added)] == list(range(10))


@pytest.mark.parametrize(
    ("damage", "error", "match"),
    [
        (lambda tip: tip["e"][0].update(c="RenamedInV2"), UnknownEventCase, "'RenamedInV2'"),
        (lambda tip: tip.update(e="garbage"), CorruptStream, "field 'e' must be a list"),
        (lambda tip: tip.update(n=99), CorruptStream, "'n'=99"),
    ],
)
async def test_bad_stored_documents_fail_clearly_and_are_not_overwritten(
    cosmos: CosmosStore, unique: str, damage: Any, error: type[Exception], match: str
) -> None:
    store = await store_on(cosmos, unique)
    stream = f"Favorites-{unique}"
    cat = store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache())
    await cat.transact(stream, fav.Add(1, "a", NOW))
    container = store.cosmos_storage.container
    tip = await container.read_item(TIP_ID, partition_key=stream)
    damage(tip)
    planted = await container.replace_item(TIP_ID, {k: v for k, v in tip.items() if not k.startswith("_")})
    for attempt in (cat.transact(stream, fav.Add(2, "b", NOW)), cat.load(stream)):
        with pytest.raises(error, match=match):
            await attempt
    after = await container.read_item(TIP_ID, partition_key=stream)
    assert after["_etag"] == planted["_etag"] and after["e"] == planted["e"]


async def test_first_load_of_a_missing_stream_is_initial(cosmos: CosmosStore, unique: str) -> None:
    store = await store_on(cosmos, unique)
    loaded = await store.category("Favorites", fav.DECIDER, fav.CODEC).load(f"Nobody-{unique}")
    assert loaded.state == () and loaded.version == 0 and loaded.etag is None


async def test_custom_access_stores_what_transmute_keeps_and_loads_in_one_read(
    cosmos: CosmosStore, unique: str
) -> None:
    """Equinox's Custom strategy on the endpoint: only removals are stored (calved into batches
    past the tip's limit), the state lives in the tip's unfold, and a load is one point read."""
    store = await store_on(cosmos, unique, max_events_in_tip=2)
    stream = f"Favorites-{unique}"
    custom = Custom(is_origin=fav.is_origin, transmute=fav.keep_removals)
    writer = store.category("Favorites", fav.DECIDER, fav.CODEC, custom, Cache())
    for k in range(6):
        await writer.transact(stream, fav.Add(k, f"n{k}", NOW))
        if k % 2:
            await writer.transact(stream, fav.Remove(k))
    stored = await writer.read_events(stream)
    assert [(i, e) for i, e in stored] == [(0, fav.Removed(1)), (1, fav.Removed(3)), (2, fav.Removed(5))]
    store.stats.reset()
    loaded = await store.category("Favorites", fav.DECIDER, fav.CODEC, custom).load(stream)
    assert sorted(x.id for x in loaded.state) == [0, 2, 4] and loaded.version == 3
    assert store.stats.requests == 1
