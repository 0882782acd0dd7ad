"""Reclaiming acknowledged data on the in-memory store: a sweep deletes the events and documents of
drained drawers, nothing an actor can still peek, and a sweep cut at any write is finished by the
next one."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from app.crashpoints import InjectedFault, armed
from app.dataavailable import DataAvailable
from app.hub.errors import SaveLeaseLost
from app.hub.memory import Request
from app.hub.reclaim import VOID_HORIZON_S
from tests.support.clock import Clock, hub_clock
from tests.unit.hub.memhub import (
    OPTIONS,
    RECIPIENT,
    Injected,
    World,
    count_writes,
    drain,
    events,
    ids,
    ids_of,
)

CAPACITY = OPTIONS.drawer_capacity


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The repository's clock (claims' leases), moved by the test."""
    return hub_clock(monkeypatch)


def event_docs(world: World) -> int:
    return sum(len(c.documents()) for c in world.store.event_shards)


def drawer_docs(world: World) -> int:
    return len(world.store.drawers.documents())


async def world_with_drained_drawers(full: int = 3, left: int = 2) -> World:
    """`full` drawers drained by the actor, then `left` events saved and not yet peeked."""
    world = World()
    hub = world.worker()
    await hub.save(events("done", full * CAPACITY))
    assert len(ids_of(await drain(hub))) == full * CAPACITY
    await hub.save(events("open", left))
    return world


async def test_a_sweep_deletes_the_drained_drawers_and_keeps_what_actors_can_still_peek() -> None:
    world = await world_with_drained_drawers()
    assert event_docs(world) == 3 * CAPACITY + 2  # a dequeue deletes nothing
    hub = world.worker()

    dry = await hub.reclaim(dry_run=True)
    assert (dry.recipients, dry.drawers, dry.documents, dry.dry_run) == (1, 3, 3 * CAPACITY + 3, True)
    assert dry.bytes > 0 and dry.requests > 0
    assert event_docs(world) == 3 * CAPACITY + 2  # a dry run writes nothing

    report = await hub.reclaim()
    assert (report.drawers, report.documents, report.bytes) == (3, dry.documents, dry.bytes)
    assert event_docs(world) == 2 and drawer_docs(world) == 1  # the open drawer and its events
    assert (await hub.reclaim()).drawers == 0
    assert await hub.depth(RECIPIENT) == {"timeseries": 2}
    later = events("later", CAPACITY)
    await hub.save(later)  # fills the open drawer and opens another
    assert ids_of(await drain(hub)) == [*ids(events("open", 2)), *ids(later)]
    assert (await hub.reclaim()).drawers == 1


async def test_a_redelivered_event_of_a_reclaimed_drawer_is_still_a_duplicate() -> None:
    """The idempotency index outlives the drawer: a redelivery after the reclaim is not saved again."""
    world = await world_with_drained_drawers(full=1, left=0)
    hub = world.worker()
    await hub.reclaim()
    assert event_docs(world) == 0
    result = await hub.save(events("done", CAPACITY))
    assert (result.saved, result.duplicates) == (0, CAPACITY)
    assert await hub.peek(RECIPIENT) is None


async def sweep_writes() -> int:
    world = await world_with_drained_drawers()
    writes: list[Request] = []
    world.store.before = count_writes(writes)
    await world.worker().reclaim()
    return len(writes)


@pytest.mark.parametrize("lose_answer", [False, True], ids=["write-failed", "answer-lost"])
async def test_a_sweep_cut_at_any_write_is_finished_by_the_next(lose_answer: bool) -> None:
    writes = await sweep_writes()
    assert writes == 3 * (CAPACITY + 1)  # each event, then its drawer
    for nth in range(1, writes + 1):
        world = await world_with_drained_drawers()
        world.fail_write(nth, lose_answer=lose_answer)
        with pytest.raises(Injected):
            await world.worker().reclaim()
        world.store.before = world.store.after = None
        await world.worker().reclaim()
        assert (event_docs(world), drawer_docs(world)) == (2, 1), f"write {nth}"
        assert ids_of(await drain(world.worker())) == ids(events("open", 2)), f"write {nth}"


@pytest.mark.parametrize("point", ["hub.reclaim.events", "hub.reclaim.drawer"])
async def test_a_sweep_failing_at_a_named_crash_point_is_finished_by_the_next(point: str) -> None:
    world = await world_with_drained_drawers()
    hub = world.worker()
    with armed(point, nth=2, action="raise") as trigger, pytest.raises(InjectedFault):
        await hub.reclaim()
    assert trigger.fired
    assert event_docs(world) > 2
    await hub.reclaim()
    assert (event_docs(world), drawer_docs(world)) == (2, 1)


# ---- voided claims ------------------------------------------------------------------------------


async def world_with_voided_claims(clock: Clock) -> tuple[World, list[str], list[list[DataAvailable]]]:
    """Saves that wrote everything and died before releasing their claims (never retried), between
    saves that finished: (world, the finished events in order, the dead batches)."""
    world = World()
    hub = world.worker()
    finished = events("a", 2)
    await hub.save(finished)
    dead: list[list[DataAvailable]] = []
    for i in range(3):
        batch = events(f"dead{i}", 2)
        with armed("hub.save.release", nth=1, action="raise"), pytest.raises(InjectedFault):
            await hub.save(batch)
        dead.append(batch)
        clock.advance(OPTIONS.lease_s + 1)
        good = events(f"good{i}", 1)
        await hub.save(good)
        finished += good
    clock.advance(VOID_HORIZON_S + 1)  # the ranges are old enough to be dropped
    return world, ids(finished), dead


async def voids_of(world: World) -> tuple[tuple[int, int, float], ...]:
    ledger, _ = await world.repository().ledgers.read(RECIPIENT)
    return ledger.voids


async def test_a_sweep_deletes_what_voided_claims_wrote_and_drops_them_from_the_ledger(clock: Clock) -> None:
    world, finished, dead = await world_with_voided_claims(clock)
    hub = world.worker()
    assert len(await voids_of(world)) == 3
    depth = await hub.depth(RECIPIENT)
    report = await hub.reclaim()
    assert (report.voids, report.documents) == (3, 3 * 2 * 2)  # each dead event and its index entry
    assert await voids_of(world) == ()
    assert event_docs(world) == len(finished) and len(world.store.ids.documents()) == len(finished)
    assert await hub.depth(RECIPIENT) == depth
    assert ids_of(await drain(hub)) == finished
    # A redelivery of a dead save is saved now: its index entries went with its claim.
    assert (await hub.save(dead[0])).saved == 2
    assert ids_of(await drain(hub)) == ids(dead[0])


async def test_a_sweep_of_voided_claims_cut_at_any_write_hides_nothing_and_shows_nothing_void(
    clock: Clock,
) -> None:
    world, _, _ = await world_with_voided_claims(clock)
    writes: list[Request] = []
    world.store.before = count_writes(writes)
    await world.worker().reclaim()
    total = len(writes)
    assert total == 3 * 2 * 2 + 1  # the deletes, then the ledger
    for nth in range(1, total + 1):
        world, finished, dead = await world_with_voided_claims(clock)
        world.fail_write(nth)
        with pytest.raises(Injected):
            await world.worker().reclaim()
        world.store.before = None
        assert await voids_of(world) != (), f"write {nth}"  # the ledger goes last
        assert ids_of(await drain(world.worker())) == finished, f"write {nth}"
        await world.worker().reclaim()
        assert await voids_of(world) == (), f"write {nth}"
        dead_ids = {i for batch in dead for i in ids(batch)}
        stored = [d["eid"] for c in world.store.event_shards for d in c.documents()]
        assert not dead_ids & set(stored), f"write {nth}"
        assert len(world.store.ids.documents()) == len(finished), f"write {nth}"


@pytest.mark.parametrize("point", ["hub.reclaim.void_documents", "hub.reclaim.voids"])
async def test_a_sweep_of_voided_claims_failing_at_a_named_crash_point_is_finished_by_the_next(
    clock: Clock, point: str
) -> None:
    world, finished, _ = await world_with_voided_claims(clock)
    hub = world.worker()
    with armed(point, nth=1, action="raise") as trigger, pytest.raises(InjectedFault):
        await hub.reclaim()
    assert trigger.fired and len(await voids_of(world)) == 3
    assert ids_of(await drain(hub)) == finished
    await hub.reclaim()
    assert await voids_of(world) == ()


# ---- the idempotency index's dedup window -------------------------------------------------------

WINDOW = replace(OPTIONS, dedup_window_s=100, expire_index_by_sweep_for_embedded_cosmos=True)


@pytest.mark.parametrize("point", [None, "hub.reclaim.index"])
async def test_index_entries_expire_after_the_dedup_window(clock: Clock, point: str | None) -> None:
    """Entries carry the window as their `ttl` (Cosmos DB expires them); where the store does not,
    the sweep deletes those older than it. A redelivery within the window is a duplicate; after it,
    the event is saved again (the documented rule)."""
    world = World(options=WINDOW)
    world.store.clock = clock.time
    hub = world.worker()
    saved = events("e", 4)
    await hub.save(saved)
    assert {d["ttl"] for d in world.store.ids.documents()} == {100}
    await drain(hub)
    clock.advance(99)
    await hub.reclaim()
    assert (await hub.save(saved)).duplicates == 4
    clock.advance(2)
    if point is not None:
        with armed(point, nth=1, action="raise") as trigger, pytest.raises(InjectedFault):
            await hub.reclaim()
        assert trigger.fired and len(world.store.ids.documents()) == 4
    report = await hub.reclaim()
    assert report.documents >= 4 and world.store.ids.documents() == []
    assert (await hub.save(saved)).saved == 4
    assert ids_of(await drain(hub)) == ids(saved)


async def test_without_the_embedded_quirk_the_sweep_leaves_expiry_to_the_store(clock: Clock) -> None:
    world = World(options=replace(WINDOW, expire_index_by_sweep_for_embedded_cosmos=False))
    world.store.clock = clock.time
    hub = world.worker()
    await hub.save(events("e", 2))
    clock.advance(1000)
    await hub.reclaim()
    assert len(world.store.ids.documents()) == 2


async def test_a_young_voided_range_is_kept_so_a_save_paused_past_its_lease_stays_hidden(
    clock: Clock,
) -> None:
    """A save pauses before writing its events; its lease passes and its claim is voided; a sweep
    runs; then the save writes on (events, drawer, catalog) and fails at its release. Its events
    stay hidden: the range is kept until it is older than the dedup window."""
    world = World()
    hub = world.worker()
    paused, resume = asyncio.Event(), asyncio.Event()

    async def pause_events(request: Request) -> None:
        if request.op == "batch" and request.container.startswith("events") and not paused.is_set():
            paused.set()
            await resume.wait()

    world.store.before = pause_events
    zombie_batch = events("zombie", 2)
    zombie = asyncio.create_task(world.worker().save(zombie_batch))
    await paused.wait()
    world.store.before = None
    clock.advance(OPTIONS.lease_s + 1)
    assert await hub.peek(RECIPIENT) is None  # voids the claim (reaped)
    await hub.reclaim()
    assert len(await voids_of(world)) == 1
    resume.set()
    with pytest.raises(SaveLeaseLost):
        await zombie
    assert await hub.peek(RECIPIENT) is None and await hub.depth(RECIPIENT) == {}
    await hub.reclaim()
    assert len(await voids_of(world)) == 1  # still young
    assert (await hub.save(zombie_batch)).saved == 2  # the caller saves them again
    assert ids_of(await drain(hub)) == ids(zombie_batch)
    clock.advance(VOID_HORIZON_S + 1)
    await hub.reclaim()
    assert await voids_of(world) == ()
    assert ids_of(await drain(hub)) == []  # nothing of the paused save ever shows
