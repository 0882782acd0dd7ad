"""Save, Peek and Dequeue on the real Cosmos endpoint: FIFO, same bundle on re-peek, idempotent save."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from app.dataavailable import DataAvailable
from app.hub import MessageHub
from app.hub.errors import BundleIdConflict, BundleNotFound, DuplicateEventConflict, SaveInProgress
from tests.integration.hub.conftest import DRAWER_CAPACITY, drawers, events, ids

MB = 1024 * 1024


async def drain(
    hub: MessageHub, actor: str, domains: tuple[str, ...] | None = None
) -> list[list[DataAvailable]]:
    bundles: list[list[DataAvailable]] = []
    while True:
        bundle = await (hub.peek(actor) if domains is None else hub.peek(actor, domains))
        if bundle is None:
            return bundles
        bundles.append([s.event for s in bundle.events])
        await hub.dequeue(actor, bundle.bundle_id)


async def test_fifo_across_successive_peeks_and_drawers(hub: MessageHub, unique: str) -> None:
    actor = f"fifo-{unique}"
    saves = [
        events(actor, 7, weight=20 * MB),
        events(actor, 1, weight=20 * MB),
        events(actor, 6, weight=20 * MB),
    ]
    for batch in saves:
        await hub.save(batch)
    assert len(await drawers(hub, actor)) == -(-14 // DRAWER_CAPACITY)
    bundles = await drain(hub, actor)
    assert [len(b) for b in bundles] == [2] * 7  # two 20 MB events per 50 MB bundle, across drawer ends
    assert ids([e for b in bundles for e in b]) == ids([e for batch in saves for e in batch])
    assert await hub.depth(actor) == {}


async def test_fifo_across_cabinets_and_domain_filters(hub: MessageHub, unique: str) -> None:
    actor = f"mix-{unique}"
    kinds = [
        ("timeseries", "a"),
        ("masterdata", "b"),
        ("timeseries", "c"),
        ("timeseries", "a"),
        ("masterdata", "b"),
    ]
    saved = [events(actor, 1, domain=d, message_type=m)[0] for d, m in kinds * 3]
    await hub.save(saved[:8])
    await hub.save(saved[8:])
    only_master = await drain(hub, actor, ("masterdata",))
    assert ids([e for b in only_master for e in b]) == ids([e for e in saved if e.origin == "masterdata"])
    remaining = [e for e in saved if e.origin != "masterdata"]
    delivered: list[DataAvailable] = []
    for bundle in await drain(hub, actor):
        undelivered = [e for e in remaining if e not in delivered]
        assert bundle[0] == undelivered[0]  # every bundle starts at the oldest waiting event
        assert len({e.message_type for e in bundle}) == 1  # one cabinet per bundle
        delivered.extend(bundle)
    assert sorted(ids(delivered)) == sorted(ids(remaining))
    for message_type in ("a", "c"):
        assert ids([e for e in delivered if e.message_type == message_type]) == ids(
            [e for e in remaining if e.message_type == message_type]
        )


async def test_peek_again_returns_the_same_bundle_and_uses_a_supplied_id(
    hub: MessageHub, unique: str
) -> None:
    actor = f"same-{unique}"
    await hub.save(events(actor, 3, weight=20 * MB))
    chosen = str(uuid.uuid4())
    first = await hub.peek(actor, bundle_id=chosen)
    assert first is not None and first.bundle_id == chosen
    await hub.save(events(actor, 2))  # new events do not change the open bundle
    again = await hub.peek(actor)
    assert again is not None and again.bundle_id == chosen
    assert [(s.seq, s.event) for s in again.events] == [(s.seq, s.event) for s in first.events]
    with pytest.raises(BundleIdConflict):
        await hub.peek(actor, bundle_id=str(uuid.uuid4()))
    await hub.dequeue(actor, chosen)
    with pytest.raises(BundleIdConflict):
        await hub.peek(actor, bundle_id=chosen)
    await hub.dequeue(actor, chosen)  # repeated (a lost answer): idempotent


async def test_dequeue_of_unknown_or_another_actors_bundle_is_not_found(hub: MessageHub, unique: str) -> None:
    owner, other = f"own-{unique}", f"oth-{unique}"
    await hub.save(events(owner, 2))
    bundle = await hub.peek(owner)
    assert bundle is not None
    with pytest.raises(BundleNotFound):
        await hub.dequeue(other, bundle.bundle_id)
    with pytest.raises(BundleNotFound):
        await hub.dequeue(owner, str(uuid.uuid4()))
    assert await hub.peek(other) is None  # an actor never sees another's data
    await hub.dequeue(owner, bundle.bundle_id)


async def test_a_dequeue_repeated_after_a_lost_answer_succeeds_and_changes_nothing(
    hub: MessageHub, unique: str
) -> None:
    actor, other = f"again-{unique}", f"other-{unique}"
    saved = events(actor, 6)
    await hub.save(saved)
    await hub.save(events(other, 1))
    bundle = await hub.peek(actor)
    assert bundle is not None
    await hub.dequeue(actor, bundle.bundle_id)
    await hub.dequeue(actor, bundle.bundle_id)  # the retry: 200, not 404
    with pytest.raises(BundleNotFound):  # another actor's dequeued bundle stays not found
        await hub.dequeue(other, bundle.bundle_id)
    seen = list(bundle.events)
    while (nxt := await hub.peek(actor)) is not None:
        seen.extend(nxt.events)
        await hub.dequeue(actor, nxt.bundle_id)
        await hub.dequeue(actor, nxt.bundle_id)
    assert ids(seen) == ids(saved), "every event once, in order"


async def test_idempotent_save_and_conflicting_content(hub: MessageHub, unique: str) -> None:
    actor = f"idem-{unique}"
    batch = events(actor, 6)
    first = await hub.save(batch)
    again = await hub.save(batch[2:] + events(actor, 1))
    assert (first.saved, first.duplicates) == (6, 0)
    assert (again.saved, again.duplicates) == (1, 4)
    changed = DataAvailable(batch[0].id, actor, "timeseries", "mt", batch[0].weight + 1)
    fresh = events(actor, 1)
    with pytest.raises(DuplicateEventConflict, match=batch[0].id) as info:
        await hub.save([*fresh, changed])
    assert not info.value.retriable and info.value.http_status == 400
    assert (await hub.depth(actor)) == {"timeseries": 7}  # the refused request stored nothing
    delivered = [e for b in await drain(hub, actor) for e in b]
    assert len(delivered) == 7 and len(set(ids(delivered))) == 7


async def test_duplicates_behind_a_new_first_event_are_found_by_the_index_creates(
    hub: MessageHub, unique: str
) -> None:
    """The first event is new, so no lookup runs; the index creates meet the saved entries, the claim
    is voided and the request planned again: only the new events are placed, once each, in order."""
    actor = f"mixed-{unique}"
    batch = events(actor, 5)
    await hub.save(batch)
    fresh = events(actor, 3)
    mixed = [fresh[0], *batch[1:4], *fresh[1:]]
    result = await hub.save(mixed)
    assert (result.saved, result.duplicates) == (3, 3)
    ledger, _ = await hub.repository.ledgers.read(actor)
    assert len(ledger.voids) == 1 and not ledger.claims  # the abandoned first plan
    delivered = [e for b in await drain(hub, actor) for e in b]
    assert ids(delivered) == ids(batch + fresh)


async def test_concurrent_saves_of_the_same_events_place_them_once(hub: MessageHub, unique: str) -> None:
    actor = f"race-{unique}"
    batch = events(actor, 40)
    results = await asyncio.gather(*(hub.save(batch) for _ in range(4)), return_exceptions=True)
    saved = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(r, SaveInProgress) for r in refused)  # retriable: the subscription retries
    assert sum(r.saved for r in saved) == 40
    delivered = [e for b in await drain(hub, actor) for e in b]
    assert ids(delivered) == ids(batch)


async def test_non_bundleable_event_travels_alone(hub: MessageHub, unique: str) -> None:
    actor = f"alone-{unique}"
    saved = events(actor, 2) + events(actor, 1, bundleable=False) + events(actor, 2)
    await hub.save(saved)
    bundles = await drain(hub, actor)
    assert [ids(b) for b in bundles] == [ids(saved[:2]), ids(saved[2:3]), ids(saved[3:])]


async def test_a_slow_peek_overtaken_by_a_peek_and_dequeue_shows_nothing_twice(
    hub: MessageHub, unique: str
) -> None:
    """Peek A reads its candidate; before A records it, peek B records the same events and the
    actor dequeues them. A must not commit its stale candidate (the events are acknowledged)."""
    actor = f"slow-{unique}"
    saved = events(actor, 3)
    await hub.save(saved)
    real_next = hub.repository.next_unacknowledged
    overtaken: list[object] = []

    async def slow_next(*args: Any, **kwargs: Any) -> Any:  # stands in for next_unacknowledged
        candidate = await real_next(*args, **kwargs)
        if not overtaken:  # the first time only: another peek and dequeue get in between
            overtaken.append(candidate)
            hub.repository.next_unacknowledged = real_next  # type: ignore[method-assign]
            other = await hub.peek(actor)
            assert other is not None
            await hub.dequeue(actor, other.bundle_id)
        return candidate

    hub.repository.next_unacknowledged = slow_next  # type: ignore[method-assign]
    shown = await hub.peek(actor)
    hub.repository.next_unacknowledged = real_next  # type: ignore[method-assign]
    assert overtaken, "the interleaving happened"
    assert shown is None, "the slow peek's events were dequeued meanwhile: nothing to show"


async def test_a_supplied_bundle_id_that_loses_the_peek_race_is_a_conflict(
    hub: MessageHub, unique: str
) -> None:
    actor = f"race-{unique}"
    await hub.save(events(actor, 2))
    real_next = hub.repository.next_unacknowledged
    winner: list[str] = []

    async def racing_next(*args: Any, **kwargs: Any) -> Any:  # stands in for next_unacknowledged
        candidate = await real_next(*args, **kwargs)
        if not winner:
            hub.repository.next_unacknowledged = real_next  # type: ignore[method-assign]
            other = await hub.peek(actor)  # a concurrent peek without an id records its bundle
            assert other is not None
            winner.append(other.bundle_id)
        return candidate

    hub.repository.next_unacknowledged = racing_next  # type: ignore[method-assign]
    mine = str(uuid.uuid4())
    with pytest.raises(BundleIdConflict) as conflict:
        await hub.peek(actor, bundle_id=mine)
    hub.repository.next_unacknowledged = real_next  # type: ignore[method-assign]
    assert winner and winner[0] in str(conflict.value), "the conflict names the bundle that won"
