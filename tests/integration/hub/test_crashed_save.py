"""A save that dies after writing (its claim is never released) is voided when its lease expires;
the retried events are placed again and delivered exactly once, in order."""

from __future__ import annotations

import pytest

from app.cosmos import CosmosStore
from app.crashpoints import InjectedFault, armed
from app.dataavailable import DataAvailable
from app.hub import MessageHub, acknowledge
from app.hub.errors import SaveInProgress
from app.hub.model import StoredEvent
from app.settings import Settings
from tests.integration.hub.conftest import DRAWER_CAPACITY, drain, events, ids
from tests.support.clock import Clock


async def save_dying_before_release(hub: MessageHub, batch: list[DataAvailable]) -> None:
    """A save that writes everything and fails before releasing its claim (`hub.save.release`):
    its claim is left as a killed worker's would be."""
    with armed("hub.save.release", nth=1, action="raise"), pytest.raises(InjectedFault):
        await hub.save(batch)


async def test_crashed_save_is_voided_and_retried_exactly_once(
    stack: Settings, cosmos: CosmosStore, unique: str, clock: Clock
) -> None:
    settings = stack.model_copy(update={"hub_drawer_capacity": DRAWER_CAPACITY})
    hub = await MessageHub.open(settings, store=cosmos)
    actor = f"crash-{unique}"
    before = events(actor, 2)
    await hub.save(before)
    batch = events(actor, 7)

    await save_dying_before_release(hub, batch)

    with pytest.raises(SaveInProgress):  # the claim still holds its lease: retry later
        await hub.save(batch)
    first = await hub.peek(actor)
    assert first is not None and ids(first.events) == ids(before)  # the fence hides the dead save
    await hub.dequeue(actor, first.bundle_id)

    ledger, _ = await hub.repository.ledgers.read(actor)
    [dead] = ledger.claims
    clock.pass_(dead.lease_until_s)  # the lease expires
    retried = await hub.save(batch)
    assert (retried.saved, retried.duplicates) == (7, 0)  # the voided entries count as absent
    again = await hub.save(batch)
    assert (again.saved, again.duplicates) == (0, 7)
    # once each, in order; the dead save's documents stay invisible
    assert await drain(hub, actor) == ids(batch)
    await hub.close()


async def test_a_save_dead_before_writing_holds_the_fence_until_its_lease_expires(
    stack: Settings, cosmos: CosmosStore, unique: str, clock: Clock
) -> None:
    """Killed between claiming and indexing: the retry places the events at once (nothing marks them
    as claimed), above the dead claim, so they are saved but invisible until that claim's lease
    expires; then depth and peeks show each exactly once. The main job waits that long at most."""
    settings = stack.model_copy(update={"hub_drawer_capacity": DRAWER_CAPACITY})
    hub = await MessageHub.open(settings, store=cosmos)
    actor = f"early-crash-{unique}"
    batch = events(actor, 7)

    with armed("hub.save.index", nth=1, action="raise"), pytest.raises(InjectedFault):
        await hub.save(batch)  # failed after the ledger claim, before the index

    retried = await hub.save(batch)
    assert (retried.saved, retried.duplicates) == (7, 0)
    ledger, _ = await hub.repository.ledgers.read(actor)
    [dead] = ledger.claims
    assert ledger.fence < dead.first_seq
    assert await hub.depth(actor) == {}  # saved, but behind the dead claim's fence
    assert await hub.peek(actor) is None

    clock.pass_(dead.lease_until_s)  # the lease expires
    assert await hub.depth(actor) == {"timeseries": 7}  # the expired claim is voided by this read
    assert await drain(hub, actor) == ids(batch)
    await hub.close()


async def test_a_dequeue_looks_past_a_long_run_of_voided_events_to_the_next_live_one(
    stack: Settings, cosmos: CosmosStore, unique: str, clock: Clock
) -> None:
    """A crashed save of 25 events leaves a voided run in the drawer; the dequeue of the bundle
    before it must find the live events behind the run (it used to look at 20 and call the
    drawer empty, losing them)."""
    settings = stack.model_copy(update={"hub_drawer_capacity": 100})
    hub = await MessageHub.open(settings, store=cosmos)
    actor = f"void-run-{unique}"
    first = events(actor, 1)
    await hub.save(first)
    bundle = await hub.peek(actor)  # ends at the drawer's end: the dequeue looks for what follows
    assert bundle is not None and ids(bundle.events) == ids(first)

    await save_dying_before_release(hub, events(actor, 26)[1:])  # 25 events, never released
    ledger, _ = await hub.repository.ledgers.read(actor)
    [dead] = ledger.claims
    clock.pass_(dead.lease_until_s)  # the lease expires
    later = events(actor, 29)[26:]
    assert (await hub.save(later)).saved == 3  # voids the dead claim, placed behind its run

    await hub.dequeue(actor, bundle.bundle_id)
    assert await drain(hub, actor) == ids(later)
    await hub.close()


async def test_a_cabinet_of_only_voided_events_does_not_hide_the_next_cabinet(
    stack: Settings, cosmos: CosmosStore, unique: str, clock: Clock
) -> None:
    settings = stack.model_copy(update={"hub_drawer_capacity": DRAWER_CAPACITY})
    hub = await MessageHub.open(settings, store=cosmos)
    actor = f"void-cabinet-{unique}"

    first_cabinet = events(actor, 3, message_type="first")
    await save_dying_before_release(hub, first_cabinet)  # its cabinet ends up all void
    ledger, _ = await hub.repository.ledgers.read(actor)
    [dead] = ledger.claims
    clock.pass_(dead.lease_until_s)  # the lease expires
    live = events(actor, 5, message_type="second")[3:]
    assert (await hub.save(live)).saved == 2  # voids the dead claim
    bundle = await hub.peek(actor)
    assert bundle is not None, "the second cabinet's events are visible"
    assert ids(bundle.events) == ids(live)
    await hub.dequeue(actor, bundle.bundle_id)
    assert await hub.peek(actor) is None
    await hub.close()


@pytest.mark.parametrize(
    "point", ["hub.save.index", "hub.save.events", "hub.save.drawer", "hub.save.catalog", "hub.save.release"]
)
async def test_a_save_failed_at_any_write_is_retried_into_events_a_peek_reaches(
    stack: Settings, cosmos: CosmosStore, unique: str, clock: Clock, point: str
) -> None:
    """A save that fails at one of its writes (here: before the catalog entry, after the drawer
    promised its events) is retried once its lease expired. The retry lands in the same drawer,
    whose first unacknowledged event is the dead save's; before, no catalog entry was ever made
    for it and no Peek reached the retried events."""
    settings = stack.model_copy(update={"hub_drawer_capacity": 100})
    hub = await MessageHub.open(settings, store=cosmos)
    actor = f"failed-{point.rsplit('.', 1)[1]}-{unique}"
    batch = events(actor, 6)
    with armed(point, nth=1, action="raise"), pytest.raises(InjectedFault):
        await hub.save(batch)
    ledger, _ = await hub.repository.ledgers.read(actor)
    [dead] = ledger.claims
    clock.pass_(dead.lease_until_s)  # the lease expires
    assert (await hub.save(batch)).saved == 6
    assert await drain(hub, actor) == ids(batch), "each event peeked once, in order"
    await hub.close()


async def test_a_save_failed_at_its_claim_leaves_nothing_and_is_retried_at_once(
    stack: Settings, cosmos: CosmosStore, unique: str
) -> None:
    """The claim is the save's first write: failed there, no claim holds the retry back and each
    event is peeked once, in order."""
    hub = await MessageHub.open(stack.model_copy(update={"hub_drawer_capacity": 100}), store=cosmos)
    actor = f"failed-claim-{unique}"
    batch = events(actor, 6)
    with armed("hub.save.claim", nth=1, action="raise"), pytest.raises(InjectedFault):
        await hub.save(batch)
    ledger, _ = await hub.repository.ledgers.read(actor)
    assert ledger.claims == (), "nothing claimed"
    assert (await hub.save(batch)).saved == 6
    assert await drain(hub, actor) == ids(batch), "each event peeked once, in order"
    await hub.close()


@pytest.mark.parametrize("nth", [1, 2])
async def test_a_dequeue_failed_at_its_write_and_retried_shows_each_event_once(
    stack: Settings, cosmos: CosmosStore, unique: str, nth: int
) -> None:
    """The actor's dequeue fails before it advances a drawer (its only write) and the actor
    retries it, as a client does on a 5xx: every event is still peeked exactly once, in order,
    and none after its dequeue."""
    point = "hub.ack.drawer"
    settings = stack.model_copy(update={"hub_drawer_capacity": 3})
    hub = await MessageHub.open(settings, store=cosmos)
    actor = f"ackfail-{unique}"
    batch = events(actor, 8, bundleable=False)  # one event a bundle: drawers are acknowledged in parts
    assert (await hub.save(batch)).saved == 8
    delivered: list[StoredEvent] = []
    with armed(point, nth=nth, action="raise") as trigger:
        while (bundle := await hub.peek(actor)) is not None:
            delivered.extend(bundle.events)
            try:
                await hub.dequeue(actor, bundle.bundle_id)
            except InjectedFault:
                await hub.dequeue(actor, bundle.bundle_id)  # the actor's retry
        assert trigger.fired, f"{point} was never reached"
    assert ids(delivered) == ids(batch), "each event peeked once, in order"
    await hub.close()


@pytest.mark.parametrize("point", ["hub.peek.catalog_added", "hub.peek.catalog_removed"])
async def test_a_peek_failed_while_correcting_the_catalog_and_retried_shows_each_event_once(
    stack: Settings, cosmos: CosmosStore, unique: str, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dequeues leave the catalog entries pointing at acknowledged events; a peek through another
    worker (no board of this actor) reads the catalog and corrects it: the new entry is added,
    then the old one removed. The peek fails before either and the actor peeks again, each time
    through a worker that reads the catalog: every event is still peeked exactly once, in order.
    No drawer position is deferred to the actor's stream: every dequeue writes its drawers."""
    monkeypatch.setattr(acknowledge, "MAX_DEFERRED_DRAWERS", 0)
    settings = stack.model_copy(update={"hub_drawer_capacity": 3})
    first = await MessageHub.open(settings, store=cosmos)
    actor = f"peekfail-{unique}"
    batch = events(actor, 8, bundleable=False)
    assert (await first.save(batch)).saved == 8
    bundle = await first.peek(actor)
    assert bundle is not None
    delivered = list(bundle.events)
    await first.dequeue(actor, bundle.bundle_id)
    await first.close()
    with armed(point, nth=1, action="raise") as trigger:
        for _ in range(30):
            hub = await MessageHub.open(settings, store=cosmos)  # a worker without a board
            try:
                bundle = await hub.peek(actor)
                if bundle is None:
                    break
                delivered.extend(bundle.events)
                await hub.dequeue(actor, bundle.bundle_id)
            except InjectedFault:
                continue
            finally:
                await hub.close()
        assert trigger.fired, f"{point} was never reached"
    assert ids(delivered) == ids(batch), "each event peeked once, in order"


async def test_a_save_dead_before_its_catalog_entry_hides_nothing_of_a_later_save(
    stack: Settings, cosmos: CosmosStore, unique: str, clock: Clock
) -> None:
    """A save dies after writing its events and drawer but before the catalog entry, and is never
    retried (the caller gave up); within its lease another save fills the same drawer. The later
    save creates the entry the dead one owed, so once the lease expires the actor peeks it."""
    settings = stack.model_copy(update={"hub_drawer_capacity": DRAWER_CAPACITY})
    hub = await MessageHub.open(settings, store=cosmos)
    actor = f"owed-{unique}"
    with armed("hub.save.catalog", nth=1, action="raise"), pytest.raises(InjectedFault):
        await hub.save(events(actor, 2))  # never retried
    later = events(actor, 2)
    assert (await hub.save(later)).saved == 2  # the same drawer, during the dead save's lease
    ledger, _ = await hub.repository.ledgers.read(actor)
    [dead] = ledger.claims
    clock.pass_(dead.lease_until_s)
    assert await hub.depth(actor) == {"timeseries": 2}
    assert await drain(hub, actor) == ids(later)
    await hub.close()
