"""An actor draining through its worker, on the in-memory store: what each peek and dequeue asks of
the stores, and that every way two workers can share one actor's peeks and dequeues shows each
event once, in order.

A worker starts an actor's peek from the bundles its last peek or dequeue wrote (no stream read)
and from what its last peek learned (no ledger or catalog read while the cabinet lasts).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from app.crashpoints import InjectedFault, armed
from app.hub import MessageHub, PeekedBundle, acknowledge
from app.hub.documents import ledger_from_doc
from app.hub.memory import Request
from tests.unit.hub.memhub import (
    MB,
    OPTIONS,
    RECIPIENT,
    Injected,
    World,
    drain,
    event,
    events,
    ids,
    ids_of,
    kinds,
    recorder,
)


async def test_after_its_own_dequeue_a_worker_peeks_and_dequeues_writing_the_drawer_and_stream_only() -> None:
    world = World()
    hub = world.worker()
    saved = [event(f"e{i}", weight=10 * MB) for i in range(12)]  # 5 to a bundle, in 4 drawers of 3
    await hub.save(saved)
    first = await hub.peek(RECIPIENT)
    assert first is not None
    await hub.dequeue(RECIPIENT, first.bundle_id)

    seen: list[Request] = []
    world.store.before = recorder(seen)
    streams = world.streams.requests
    second = await hub.peek(RECIPIENT)
    assert second is not None
    assert world.streams.requests == streams + 1  # BundlePeeked appended; the stream not read
    # No ledger, catalog or drawers read: the events beyond the first bundle's came with its read,
    # and the next drawer's events with one query.
    assert {k for k in kinds(seen)} <= {("query", "events")}, kinds(seen)

    seen.clear()
    streams = world.streams.requests
    await hub.dequeue(RECIPIENT, second.bundle_id)
    assert world.streams.requests == streams + 1  # BundleDequeued appended
    # Each drawer whose events the bundle ends is written once (a full one left empty is deleted);
    # the position in the drawer it leaves events in is recorded by the append. The catalog keeps
    # its entries (never above a drawer's first unacknowledged event; a peek reading the catalog
    # checks them).
    ended = [s for s in second.ref.slices if s.next_seq is None]
    assert len(seen) == len(ended) == 2 and len(second.ref.slices) == 3, kinds(seen)
    assert {k for k in kinds(seen)} <= {("replace", "drawers"), ("delete", "drawers")}, kinds(seen)
    assert ids_of([first, second, *await drain(hub)]) == ids(saved)


async def drain_through_workers_without_boards(
    world: World, failure: type[BaseException]
) -> list[PeekedBundle]:
    """Peek and dequeue through a new worker each time (no board: every peek reads the catalog);
    a peek failing with `failure` is made again, and so is a dequeue, as the actor does."""
    shown: list[PeekedBundle] = []
    for _ in range(40):
        hub = world.worker()
        try:
            bundle = await hub.peek(RECIPIENT)
        except failure:
            continue
        if bundle is None:
            return shown
        shown.append(bundle)
        try:
            await hub.dequeue(RECIPIENT, bundle.bundle_id)
        except failure:
            await hub.dequeue(RECIPIENT, bundle.bundle_id)
    raise AssertionError("not drained through 40 workers")


Round = tuple[int, bool, int]  # peek on worker, peek again on the other worker or not, dequeue on worker
ROUNDS: list[Round] = list(itertools.product((0, 1), (False, True), (0, 1)))


@pytest.mark.parametrize("first", ROUNDS, ids=str)
async def test_every_sharing_of_an_actor_between_two_workers_over_three_rounds_shows_each_event_once_in_order(
    first: Round,
) -> None:
    """Bound: every sequence of 3 rounds (8^3 = 512), each a peek on either worker, optionally a
    peek again on the other, and the dequeue on either; then the workers drain in turn. Events of
    two cabinets, over several drawers, two to a bundle."""
    for rest in itertools.product(ROUNDS, repeat=2):
        world = World()
        workers = [world.worker(), world.worker()]
        saved = [event(f"e{i}", message_type="ab"[i % 3 == 0], weight=20 * MB) for i in range(8)]
        await workers[0].save(saved)
        shown: list[PeekedBundle] = []
        for peek_on, peek_again, dequeue_on in (first, *rest):
            bundle = await workers[peek_on].peek(RECIPIENT)
            if bundle is None:
                break
            if peek_again:
                again = await workers[1 - peek_on].peek(RECIPIENT)
                assert again is not None and again.bundle_id == bundle.bundle_id
                assert ids_of([again]) == ids_of([bundle])
            await workers[dequeue_on].dequeue(RECIPIENT, bundle.bundle_id)
            shown.append(bundle)
        shown += await drain_in_turn(workers)
        assert sorted(ids_of(shown)) == sorted(ids(saved)), (first, rest)
        assert len(set(ids_of(shown))) == len(saved), (first, rest)
        for cabinet in "ab":
            expected = [e.id for e in saved if e.message_type == cabinet]
            assert [
                s.event.id for b in shown for s in b.events if s.event.message_type == cabinet
            ] == expected


async def drain_in_turn(workers: list[MessageHub]) -> list[PeekedBundle]:
    bundles: list[PeekedBundle] = []
    for turn in range(100):
        hub = workers[turn % 2]
        bundle = await hub.peek(RECIPIENT)
        if bundle is None:
            assert await workers[(turn + 1) % 2].peek(RECIPIENT) is None
            return bundles
        bundles.append(bundle)
        await hub.dequeue(RECIPIENT, bundle.bundle_id)
    raise AssertionError("not drained")


@pytest.mark.parametrize("point", ["hub.peek.catalog_added", "hub.peek.catalog_removed"])
async def test_a_peek_failing_while_it_corrects_the_catalog_and_retried_shows_each_event_once(
    point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dequeues leave the catalog pointing at acknowledged events; a worker without a board reads
    it, adds the entry at the drawer's first unacknowledged event and removes the old one. It fails
    there and the actor peeks again (through a worker without a board each time).

    No acknowledgement is deferred (as for an actor holding the most deferred drawers): each
    dequeue writes its drawers, so a drawer with events left gets a new entry."""
    monkeypatch.setattr(acknowledge, "MAX_DEFERRED_DRAWERS", 0)
    world = World()
    saved = events("e", 9)
    first = world.worker()
    await first.save(saved)
    shown = [bundle := await first.peek(RECIPIENT)]
    assert bundle is not None
    await first.dequeue(RECIPIENT, bundle.bundle_id)
    with armed(point, nth=1, action="raise") as trigger:
        shown += await drain_through_workers_without_boards(world, InjectedFault)
    assert trigger.fired, point
    assert ids_of([b for b in shown if b is not None]) == ids(saved)


@pytest.mark.parametrize("nth", [1, 2, 3, 4])
@pytest.mark.parametrize("lose_answer", [False, True], ids=["write-failed", "answer-lost"])
async def test_a_peek_whose_catalog_corrections_fail_at_any_write_leaves_every_drawer_reachable(
    nth: int, lose_answer: bool
) -> None:
    """Two cabinets of one drawer each, one bundle of each dequeued: both entries point at
    acknowledged events. Each peek of a worker without a board corrects the entry of the cabinet
    it reads (a create, then a delete: writes 1 and 2, then the dequeue's, then the next peek's).
    Whichever write fails, later full peeks still reach every event: an entry is removed only once
    its drawer's new one exists (its drawer's only way in)."""
    world = World(options=dataclasses.replace(OPTIONS, drawer_capacity=10))
    saved = [event(f"{c}{i}", message_type=c) for i in range(3) for c in "ab"]  # a0 b0 a1 b1 a2 b2
    first = world.worker()
    await first.save(saved)
    shown: list[PeekedBundle] = []
    for _ in range(2):  # a0 a1, then b0 b1
        bundle = await first.peek(RECIPIENT)
        assert bundle is not None
        shown.append(bundle)
        await first.dequeue(RECIPIENT, bundle.bundle_id)
    world.fail_write(nth, lose_answer=lose_answer)
    shown += await drain_through_workers_without_boards(world, Injected)
    assert sorted(ids_of(shown)) == sorted(ids(saved)), f"write {nth}"
    assert len(ids_of(shown)) == len(saved)


async def test_a_save_of_many_recipients_claims_for_at_most_save_recipients_of_them_at_once() -> None:
    """Saves queue before they claim: at every write, at most `save_recipients` ledgers hold a
    claim, and every recipient's events are saved and drained in order."""
    world = World(options=dataclasses.replace(OPTIONS, save_recipients=3))
    recipients = [f"57900000001{i:02d}" for i in range(10)]
    saved = [dataclasses.replace(event(f"{r}-{i}"), recipient=r) for i in range(4) for r in recipients]
    held: list[int] = []

    async def count_claims(request: Request) -> None:
        ledgers = world.store.ledgers.documents()
        held.append(sum(1 for doc in ledgers if ledger_from_doc(doc).claims))

    world.store.after = count_claims
    hub = world.worker()
    result = await hub.save(saved)
    assert result.saved == len(saved)
    assert max(held) == 3, held  # the gate was full, never over
    world.store.after = None
    for recipient in recipients:
        shown = await drain(hub, recipient)
        assert ids_of(shown) == [e.id for e in saved if e.recipient == recipient]


async def test_a_drawer_drained_through_one_worker_is_queried_once() -> None:
    """The first peek's query returns the drawer's events; the later bundles come from what it
    left, and the last one knows the drawer ends there (its document's last event) without asking."""
    world = World(options=dataclasses.replace(OPTIONS, drawer_capacity=100, page_size=100))
    saved = [event(f"e{i}", weight=10 * MB) for i in range(12)]  # bundles of 5, 5 and 2
    hub = world.worker()
    await hub.save(saved)
    seen: list[Request] = []
    world.store.before = recorder(seen)
    shown = await drain(hub)
    assert [len(b.events) for b in shown] == [5, 5, 2]
    assert ids_of(shown) == ids(saved)
    assert kinds(seen).count(("query", "events")) == 1, kinds(seen)


async def test_a_peek_from_a_board_with_an_older_fence_keeps_the_entry_of_a_drawer_acknowledged_since(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker's board holds the fence of its last catalog read. Another worker dequeued a bundle
    of a cabinet this board never read, leaving the drawer's first unacknowledged event above that
    fence. Checking the cabinet, the peek replaces the drawer's stale catalog entry with one at
    that event: it used to remove it and add none (only drawers below the board's fence were
    read), and the event was never shown again. (No acknowledgement is deferred: the dequeue writes
    the drawer.)"""
    monkeypatch.setattr(acknowledge, "MAX_DEFERRED_DRAWERS", 0)
    world = World()
    mine, other = world.worker(), world.worker()
    await mine.save([event("a0", message_type="a"), event("b0", message_type="b")])
    first = await mine.peek(RECIPIENT)
    assert first is not None and [s.event.message_type for s in first.events] == ["a"]
    await mine.dequeue(RECIPIENT, first.bundle_id)
    later = [event("b1", message_type="b"), event("b2", message_type="b")]
    await mine.save(later)  # cabinet b's drawer is full: b0, b1, b2
    b0 = event("b0", message_type="b")
    second = await other.peek(RECIPIENT)
    assert second is not None and ids_of([second]) == ids([b0, later[0]])
    await other.dequeue(RECIPIENT, second.bundle_id)
    assert ids_of(await drain(mine)) == ids(later[1:])
