"""Every row of the seed's acknowledge table as this hub keeps it, observed in the drawer and catalog
documents.

A dequeue writes only the drawers it acknowledges: the drawer's position moves and its catalog
entry stays where it was (at or below the drawer's first unacknowledged event, or pointing at a
drawer with nothing left). A drawer the bundle leaves events in is not written at all: its position
goes into the actor's stream, and the drawers here are read as the actor's acknowledgements made
them (stored, with those positions applied). A Save adds the entry of a drawer that had nothing
unacknowledged. A peek that reads the catalog (through a worker that holds no board of the actor)
checks the entries of the cabinet it reads against the stored drawers; each test then checks that
the catalog points exactly at the stored drawers' first unacknowledged events, never above the
acknowledged ones.
"""

from __future__ import annotations

from app.hub import HubRepository, MessageHub
from app.hub.model import CatalogEntry
from tests.integration.hub.conftest import DRAWER_CAPACITY, catalog, drawers, events, ids

MB = 1024 * 1024
HEAVY = 20 * MB  # two per bundle: a peek can leave events behind in a drawer


def elsewhere(hub: MessageHub) -> MessageHub:
    """The same hub as another worker sees it: no board of any actor, so its peeks read the catalog."""
    repository = hub.repository
    return MessageHub(HubRepository(repository.io, repository.options), hub.bundle_log)


async def dequeue_leaving_the_catalog(hub: MessageHub, actor: str, bundle_id: str) -> list[CatalogEntry]:
    """Dequeue, check the catalog did not change, and return it."""
    before = await catalog(hub, actor)
    await hub.dequeue(actor, bundle_id)
    after = await catalog(hub, actor)
    assert after == before
    return after


async def assert_catalog_exact(hub: MessageHub, actor: str) -> None:
    entries = await catalog(hub, actor)
    stored = await drawers(hub, actor, stored=True)
    live = {(d.drawer_id, d.unacked_from) for d in stored if d.unacked_from is not None}
    assert {(e.drawer_id, e.seq) for e in entries} == live
    acknowledged = {d.drawer_id: d.unacked_from for d in await drawers(hub, actor)}
    for entry in entries:
        first = acknowledged[entry.drawer_id]
        assert first is not None and entry.seq <= first


async def test_events_left_after_peek_keep_the_entry_until_a_peek_reading_the_catalog_moves_it(
    hub: MessageHub, unique: str
) -> None:
    actor = f"left-{unique}"
    saved = events(actor, 4, weight=HEAVY)
    await hub.save(saved)
    bundle = await hub.peek(actor)
    assert bundle is not None and ids(bundle.events) == ids(saved[:2])
    [entry] = await dequeue_leaving_the_catalog(hub, actor, bundle.bundle_id)
    [drawer] = await drawers(hub, actor)
    [stored] = await drawers(hub, actor, stored=True)
    assert stored.ack_seq == 0 and stored.acked == 0  # the position waits in the actor's stream
    assert entry.drawer_id == drawer.drawer_id
    assert drawer.unacked_from == bundle.events[-1].seq + 1
    assert entry.seq == bundle.events[0].seq < drawer.unacked_from
    assert drawer.ack_seq == bundle.events[-1].seq
    assert await hub.depth(actor) == {"timeseries": 2}
    rest = await elsewhere(hub).peek(actor)
    assert rest is not None and ids(rest.events) == ids(saved[2:])
    await assert_catalog_exact(hub, actor)


async def test_drawer_emptied_and_nothing_new_gets_no_entry_until_the_next_save(
    hub: MessageHub, unique: str
) -> None:
    actor = f"empty-{unique}"
    await hub.save(events(actor, 2, weight=HEAVY))
    bundle = await hub.peek(actor)
    assert bundle is not None and len(bundle.events) == 2
    await dequeue_leaving_the_catalog(hub, actor, bundle.bundle_id)
    [drawer] = await drawers(hub, actor)
    assert drawer.unacked_from is None
    assert await hub.peek(actor) is None
    assert await elsewhere(hub).peek(actor) is None
    assert await catalog(hub, actor) == []  # that peek removed the entry the dequeue left behind
    later = events(actor, 1)
    await hub.save(later)  # the same (not full) drawer gains an unacknowledged event: Save adds the entry
    [entry] = await catalog(hub, actor)
    assert entry.drawer_id == drawer.drawer_id and entry.seq == drawer.last_seq + 1
    again = await hub.peek(actor)
    assert again is not None and ids(again.events) == ids(later)


async def test_drawer_emptied_but_new_events_since_peek_keep_the_drawer_reachable(
    hub: MessageHub, unique: str
) -> None:
    actor = f"since-{unique}"
    await hub.save(events(actor, 2, weight=HEAVY))
    bundle = await hub.peek(actor)
    assert bundle is not None and len(bundle.events) == 2
    later = events(actor, 2)
    await hub.save(later)  # the drawer still has unacknowledged (peeked) events: Save adds no entry
    assert len(await catalog(hub, actor)) == 1
    [entry] = await dequeue_leaving_the_catalog(hub, actor, bundle.bundle_id)
    [drawer] = await drawers(hub, actor)
    assert drawer.unacked_from == bundle.events[-1].seq + 1
    assert entry.seq < drawer.unacked_from
    again = await elsewhere(hub).peek(actor)
    assert again is not None and ids(again.events) == ids(later)
    await assert_catalog_exact(hub, actor)


async def test_impossible_row_leftovers_never_vanish_when_more_events_arrive(
    hub: MessageHub, unique: str
) -> None:
    actor = f"never-{unique}"
    saved = events(actor, 3, weight=HEAVY)
    await hub.save(saved)
    bundle = await hub.peek(actor)
    assert bundle is not None and ids(bundle.events) == ids(saved[:2])
    later = events(actor, 1, weight=HEAVY)
    await hub.save(later)
    await dequeue_leaving_the_catalog(hub, actor, bundle.bundle_id)
    [drawer] = await drawers(hub, actor)
    assert drawer.unacked_from == bundle.events[-1].seq + 1  # the leftover, not the newer event
    rest = await elsewhere(hub).peek(actor)
    assert rest is not None and ids(rest.events) == ids(saved[2:] + later)
    await assert_catalog_exact(hub, actor)


async def test_a_full_drained_drawer_is_removed_by_the_reclaim_sweep(hub: MessageHub, unique: str) -> None:
    actor = f"drain-{unique}"
    saved = events(actor, DRAWER_CAPACITY + 2)
    await hub.save(saved)
    assert len(await drawers(hub, actor)) == 2
    bundle = await hub.peek(actor)
    assert bundle is not None and ids(bundle.events) == ids(saved)
    await hub.dequeue(actor, bundle.bundle_id)
    # The dequeue writes the full drawer as drained (the mark the sweep finds it by); the sweep
    # deletes it with its events.
    assert [d.unacked_from for d in await drawers(hub, actor)] == [None, None]
    assert (await hub.reclaim()).drawers == 1
    remaining = await drawers(hub, actor)
    assert len(remaining) == 1 and remaining[0].used == 2 and remaining[0].unacked_from is None
    assert await hub.peek(actor) is None
    assert await elsewhere(hub).peek(actor) is None
    assert await catalog(hub, actor) == []
