"""Reclaiming acknowledged data on the in-memory store: a sweep deletes the events and documents of
drained drawers, nothing an actor can still peek, and a sweep cut at any write is finished by the
next one."""

from __future__ import annotations

import pytest

from app.crashpoints import InjectedFault, armed
from app.hub.memory import Request
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
