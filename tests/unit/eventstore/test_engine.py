"""The engine over the in-memory storage: strategies, cache, conflicts, crashes, bad data."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.eventstore import (
    Cache,
    CorruptStream,
    Custom,
    Decider,
    EventStore,
    EventStoreConfigError,
    LatestKnownEvent,
    MemoryStreamStorage,
    RollingState,
    Snapshot,
    StoreOptions,
    SyncConflict,
    UnknownEventCase,
    Unoptimized,
)
from app.eventstore.model import TIP_ID, BatchDocument, TipDocument
from app.eventstore.ports import WriteConflict

from . import favorites as fav

NOW = datetime(2024, 5, 1, tzinfo=UTC)
# LatestKnownEvent suits deciders whose state is the last event (tested separately below).
STRATEGIES = [
    Unoptimized(),
    Snapshot(),
    RollingState(),
    Custom(
        is_origin=fav.is_origin,
        transmute=lambda es, s: ([e for e in es if isinstance(e, fav.Removed)], fav.unfold(s)),
    ),
]


def pure_state(commands: Sequence[fav.Command]) -> fav.State:
    state: fav.State = ()
    for command in commands:
        state = fav.DECIDER.fold(state, fav.decide(command, state))
    return state


commands = st.lists(
    st.one_of(
        st.builds(fav.Add, st.integers(0, 6), st.sampled_from(["a", "b"]), st.just(NOW)),
        st.builds(fav.Remove, st.integers(0, 6)),
    ),
    max_size=30,
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(cmds=commands, max_events=st.integers(1, 5), strategy=st.sampled_from(STRATEGIES))
def test_any_strategy_loads_the_state_the_pure_fold_computes(
    cmds: list[fav.Command], max_events: int, strategy: Any
) -> None:
    async def run() -> None:
        store = EventStore(MemoryStreamStorage(page_size=2), StoreOptions(max_events_in_tip=max_events))
        writer = store.category("Favorites", fav.DECIDER, fav.CODEC, strategy, Cache())
        for command in cmds:
            await writer.transact("Favorites-x", command)
        fresh = store.category("Favorites", fav.DECIDER, fav.CODEC, strategy)
        assert (await fresh.load("Favorites-x")).state == pure_state(cmds)
        assert (await writer.load("Favorites-x")).state == pure_state(cmds)

    asyncio.run(run())


class Counting:
    """Counts evolve calls so a test can prove what was (not) folded."""

    def __init__(self) -> None:
        self.calls = 0

    def evolve(self, state: fav.State, event: fav.Event) -> fav.State:
        self.calls += 1
        return fav.evolve(state, event)

    def decider(self) -> Decider[fav.Command, fav.State, fav.Event]:
        return replace(fav.DECIDER, evolve=self.evolve)


async def test_seed_worked_example_every_way_to_state5_agrees() -> None:
    """Batches 0..3 of one event, tip i=4 with e=[event 4] and unfolds of state5 and state4.

    The seed numbers an unfold by its last event; here an unfold's `i` is the version it was
    taken at (state4 = after events 0..3 = version 4, state5 = version 5).
    """
    e: list[fav.Event] = [
        fav.Added(fav.Item(1, "a", NOW)),
        fav.Added(fav.Item(2, "b", NOW)),
        fav.Removed(1),
        fav.Added(fav.Item(3, "c", NOW)),
        fav.Added(fav.Item(4, "d", NOW)),
    ]
    state3 = fav.DECIDER.fold((), e[:3])
    state4 = fav.DECIDER.fold((), e[:4])
    state5 = fav.DECIDER.fold((), e)
    storage = MemoryStreamStorage()
    enc = [fav.CODEC.encode(x) for x in e]
    for i in range(4):
        storage.documents[("S", str(i))] = BatchDocument("S", i, (enc[i],)).to_json()
    from app.eventstore.model import EncodedUnfold

    s1, s2 = fav.CODEC.encode(fav.Compacted(state5)), fav.CODEC.encode(fav.Compacted(state4))
    tip = TipDocument("S", 4, (enc[4],), (EncodedUnfold(5, s1), EncodedUnfold(4, s2)))
    storage.documents[("S", TIP_ID)] = {**tip.to_json(compress_min_bytes=1), "_etag": '"etagXYZ"'}
    store = EventStore(storage)

    # fold initial [all five events]: a query besides the tip read.
    counting = Counting()
    unopt = store.category("Fav", counting.decider(), fav.CODEC, Unoptimized())
    storage.requests = 0
    assert (await unopt.load("S")).state == state5
    assert counting.calls == 5 and storage.requests == 2

    # fold initial [S1 s5]: one point read, one evolve (the compressed unfold).
    counting = Counting()
    snap = store.category("Fav", counting.decider(), fav.CODEC, Snapshot(), Cache())
    storage.requests = 0
    loaded = await snap.load("S")
    assert loaded.state == state5 and loaded.version == 5 and loaded.etag == '"etagXYZ"'
    assert counting.calls == 1 and storage.requests == 1

    # (if isStart (S2 s4) and not isStart (S1 s5)): fold initial [S2 s4; C3 d5], still one point read.
    def only_state4(event: fav.Event) -> bool:
        return isinstance(event, fav.Compacted) and event.items == state4

    counting = Counting()
    older_origin = replace(counting.decider(), is_origin=only_state4)
    from_s4 = store.category("Fav", older_origin, fav.CODEC, Snapshot())
    storage.requests = 0
    assert (await from_s4.load("S")).state == state5
    assert counting.calls == 2 and storage.requests == 1  # s4 and d5 folded; no query

    # state5 cached with etagXYZ: the tip read answers NotModified and nothing is folded.
    counting.calls = 0
    assert (await snap.load("S")).state == state5
    assert counting.calls == 0 and storage.requests == 2

    # fold state4 [C3 d5] and fold state3 [C1 d4; C3 d5]: from a cache at version 4 / 3.
    for cached_state, version, expected_calls in ((state4, 4, 1), (state3, 3, 2)):
        counting = Counting()
        cache = Cache()
        from app.eventstore.cache import CacheEntry

        older_tip = TipDocument("S", 3 if version == 3 else 4, (), (), '"older"')
        cache.put("Fav", "S", CacheEntry(cached_state, version, '"older"', older_tip, cache.now_s()))
        incremental = store.category("Fav", counting.decider(), fav.CODEC, Unoptimized(), cache)
        assert (await incremental.load("S")).state == state5
        assert counting.calls == expected_calls


async def test_concurrent_favorites_writers_resolve_conflicts_and_apply_each_decision_once() -> None:
    storage = MemoryStreamStorage()
    store = EventStore(storage, StoreOptions(max_events_in_tip=3))
    writers = [store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache()) for _ in range(10)]
    # Every writer adds its own item and item 0 (only one Added for item 0 may be written).
    await asyncio.gather(*(w.transact("F", fav.Add(k + 1, f"n{k}", NOW)) for k, w in enumerate(writers)))
    await asyncio.gather(*(w.transact("F", fav.Add(0, "shared", NOW)) for w in writers))
    stored = [event for _, event in await writers[0].read_events("F")]
    added = sorted(event.item.id for event in stored if isinstance(event, fav.Added))
    assert added == list(range(11))
    final = await store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot()).load("F")
    assert sorted(x.id for x in final.state) == list(range(11)) and final.version == 11


class AlwaysRaced:
    """Delegates to a storage, but every tip replace loses to another writer."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.replaces = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def replace_tip(self, tip: TipDocument, expected_etag: str) -> str:
        self.replaces += 1
        raise WriteConflict(tip.stream)


async def test_bounded_retries_end_in_sync_conflict_naming_stream_and_version() -> None:
    storage = MemoryStreamStorage()
    await (
        EventStore(storage).category("Favorites", fav.DECIDER, fav.CODEC).transact("F", fav.Add(1, "a", NOW))
    )
    raced = AlwaysRaced(storage)
    store = EventStore(raced, StoreOptions(max_sync_attempts=3, retry_backoff_max_s=0))
    cat = store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot())
    with pytest.raises(SyncConflict, match=r"stream 'F': gave up after 3 attempts.*at version 1"):
        await cat.transact("F", fav.Add(2, "b", NOW))
    assert raced.replaces == 3


async def test_latest_known_event_loads_from_the_last_event_in_one_read() -> None:
    storage = MemoryStreamStorage()
    latest: Decider[fav.Command, fav.State, fav.Event] = Decider(
        initial=(),
        evolve=fav.evolve,
        decide=lambda c, s: [fav.Compacted((*s, fav.Item(c.id, "x", NOW)))],
    )
    cat = EventStore(storage, StoreOptions(max_events_in_tip=2)).category(
        "Latest", latest, fav.CODEC, LatestKnownEvent()
    )
    for k in range(7):
        await cat.transact("L", fav.Add(k, "x", NOW))
    storage.requests = 0
    fresh = EventStore(storage).category("Latest", latest, fav.CODEC, LatestKnownEvent())
    assert [x.id for x in (await fresh.load("L")).state] == list(range(7))
    assert storage.requests == 1


class DiesAfterCalving:
    """Delegates to a storage but 'crashes' (raises) right after writing a calved batch."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write_batch(self, batch: BatchDocument) -> None:
        await self.inner.write_batch(batch)
        raise RuntimeError("writer died")


@pytest.mark.parametrize("events_after_death", [0, 2])
async def test_writer_dying_between_calve_and_tip_leaves_no_duplicate_or_lost_event(
    events_after_death: int,
) -> None:
    storage = MemoryStreamStorage()
    options = StoreOptions(max_events_in_tip=2)
    healthy = EventStore(storage, options).category("Favorites", fav.DECIDER, fav.CODEC, Unoptimized())
    for k in range(2):
        await healthy.transact("F", fav.Add(k, "a", NOW))
    dying = EventStore(DiesAfterCalving(storage), options).category(
        "Favorites", fav.DECIDER, fav.CODEC, Unoptimized()
    )
    with pytest.raises(RuntimeError, match="writer died"):
        await dying.transact("F", fav.Add(50, "lost decision", NOW))
    assert ("F", "0") in storage.documents  # the orphan calved batch
    assert [i for i, _ in await healthy.read_events("F")] == [0, 1]
    # A racing writer may merge into the tip first (bigger limit), then the next calve grows the orphan.
    if events_after_death:
        wide = EventStore(storage, StoreOptions(max_events_in_tip=10)).category(
            "Favorites", fav.DECIDER, fav.CODEC, Unoptimized()
        )
        for k in range(events_after_death):
            await wide.transact("F", fav.Add(10 + k, "b", NOW))
    await healthy.transact("F", fav.Add(99, "next", NOW))
    stored = await healthy.read_events("F")
    assert [i for i, _ in stored] == list(range(len(stored)))
    ids = [e.item.id for _, e in stored if isinstance(e, fav.Added)]
    assert ids == [0, 1, *range(10, 10 + events_after_death), 99]


async def test_stale_calving_writer_cannot_shrink_a_grown_batch() -> None:
    storage = MemoryStreamStorage()
    grown = BatchDocument("F", 0, tuple(fav.CODEC.encode(fav.Removed(k)) for k in range(3)))
    await storage.write_batch(grown)
    with pytest.raises(WriteConflict):
        await storage.write_batch(BatchDocument("F", 0, grown.events[:2]))
    assert storage.documents[("F", "0")]["n"] == 3


async def test_unknown_case_in_the_stream_fails_clearly_and_nothing_is_written() -> None:
    storage = MemoryStreamStorage()
    cat = EventStore(storage).category("Favorites", fav.DECIDER, fav.CODEC, Snapshot())
    await cat.transact("F", fav.Add(1, "a", NOW))
    storage.documents[("F", TIP_ID)]["e"][0]["c"] = "Renamed"
    before = dict(storage.documents[("F", TIP_ID)])
    with pytest.raises(UnknownEventCase, match="'Renamed'"):
        await cat.transact("F", fav.Add(2, "b", NOW))
    assert storage.documents[("F", TIP_ID)] == before


async def test_corrupt_tip_fails_clearly_and_is_not_overwritten() -> None:
    storage = MemoryStreamStorage()
    cat = EventStore(storage).category("Favorites", fav.DECIDER, fav.CODEC, Snapshot())
    await cat.transact("F", fav.Add(1, "a", NOW))
    storage.documents[("F", TIP_ID)]["n"] = "garbage"
    before = dict(storage.documents[("F", TIP_ID)])
    with pytest.raises(CorruptStream, match="stream 'F' document '-1'"):
        await cat.transact("F", fav.Add(2, "b", NOW))
    assert storage.documents[("F", TIP_ID)] == before


async def test_unfolds_of_an_unknown_case_are_skipped_and_events_used() -> None:
    storage = MemoryStreamStorage()
    cat = EventStore(storage, StoreOptions(max_events_in_tip=1)).category(
        "Favorites", fav.DECIDER, fav.CODEC, Snapshot()
    )
    for k in range(3):
        await cat.transact("F", fav.Add(k, "a", NOW))
    storage.documents[("F", TIP_ID)]["u"][0]["c"] = "CompactedV0"
    fresh = EventStore(storage).category("Favorites", fav.DECIDER, fav.CODEC, Snapshot())
    assert [x.id for x in (await fresh.load("F")).state] == [2, 1, 0]


def test_snapshot_access_without_unfold_is_a_config_error() -> None:
    no_unfold = replace(fav.DECIDER, unfold=None)
    with pytest.raises(EventStoreConfigError, match="Snapshot access needs"):
        EventStore(MemoryStreamStorage()).category("X", no_unfold, fav.CODEC, Snapshot())


async def test_decide_returns_its_result_and_an_empty_decision_writes_nothing() -> None:
    storage = MemoryStreamStorage()
    cat = EventStore(storage).category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache())
    assert await cat.decide("F", lambda s: (len(s), [])) == 0
    assert storage.documents == {}
    count = await cat.decide("F", lambda s: (len(s) + 1, [fav.Added(fav.Item(7, "a", NOW))]))
    assert count == 1 and await cat.query("F", len) == 1


async def test_cache_with_allow_stale_skips_the_read() -> None:
    storage = MemoryStreamStorage()
    cat = EventStore(storage).category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache())
    await cat.transact("F", fav.Add(1, "a", NOW))
    storage.requests = 0
    assert await cat.query("F", len, allow_stale_s=60) == 1
    assert storage.requests == 0


async def test_assume_cached_skips_the_tip_read_and_a_stale_cache_still_converges() -> None:
    storage = MemoryStreamStorage()
    store = EventStore(storage)
    mine = store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot(), Cache())
    await mine.transact("F", fav.Add(1, "a", NOW))
    storage.requests = 0
    await mine.transact("F", fav.Add(2, "b", NOW), assume_cached=True)
    assert storage.requests == 1  # only the conditional tip replace
    await store.category("Favorites", fav.DECIDER, fav.CODEC, Snapshot()).transact("F", fav.Add(3, "c", NOW))
    after = await mine.transact("F", fav.Add(3, "c", NOW), assume_cached=True)  # stale: conflict, reload
    assert sorted(x.id for x in after.state) == [1, 2, 3] and after.version == 3
