"""Dequeue asking for the next bundle in the same call (`DELETE /api/dequeue?peek=`), on the in-memory
store: what it asks of the stores, and that it shows each event once, in order, when it shares the
actor with another worker at any point and when any of its writes fails or loses its answer."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest

from app.dataavailable import DataAvailable
from app.hub import MessageHub, PeekedBundle
from app.hub.memory import Request
from tests.unit.hub.memhub import (
    MB,
    RECIPIENT,
    Injected,
    Preemption,
    World,
    count_writes,
    drain,
    event,
    events,
    ids,
    ids_of,
    kinds,
    recorder,
)


async def drain_dequeuing_with_peek(hub: MessageHub, limit: int = 100) -> list[PeekedBundle]:
    """Peek once, then dequeue each bundle asking for the next, until none comes."""
    shown: list[PeekedBundle] = []
    bundle = await hub.peek(RECIPIENT)
    for _ in range(limit):
        if bundle is None:
            return shown
        shown.append(bundle)
        bundle = await hub.dequeue_and_peek(RECIPIENT, bundle.bundle_id)
    raise AssertionError(f"still not drained after {limit} bundles")


async def test_a_dequeue_that_peeks_appends_once_and_writes_only_the_drawers() -> None:
    world = World.with_hooked_streams()
    hub = world.worker()
    saved = [event(f"e{i}", weight=10 * MB) for i in range(12)]  # 5 to a bundle, in 4 drawers of 3
    await hub.save(saved)
    first = await hub.peek(RECIPIENT)
    assert first is not None
    second = await hub.dequeue_and_peek(RECIPIENT, first.bundle_id)
    assert second is not None

    seen: list[Request] = []
    world.store.before = recorder(seen)
    third = await hub.dequeue_and_peek(RECIPIENT, second.bundle_id)
    assert third is not None
    done = kinds(seen)
    # The second bundle's drawers it ends, each written once (a full one left empty is deleted),
    # then one append recording its dequeue, the position in the drawer it leaves events in, and
    # the third bundle; no stream, catalog or drawer read.
    drawers = [k for k in done if k[1] == "drawers"]
    ended = [s for s in second.ref.slices if s.next_seq is None]
    assert len(drawers) == len(ended) == 2 and len(second.ref.slices) == 3, done
    assert set(drawers) <= {("replace", "drawers"), ("delete", "drawers")}, done
    left = second.ref.slices[-1]
    recorded = (await hub.bundle_log.load(RECIPIENT)).deferred_acks()[left.drawer_id]
    assert (recorded.ack_seq, recorded.next_seq, recorded.acked) == (left.last_seq, left.next_seq, 1)
    assert [k for k in done if k[1] == "streams"] == [("replace", "streams")], done
    assert done[-1] == ("replace", "streams"), done
    assert {k for k in done if k[1] not in ("drawers", "streams")} <= {
        ("query", "events"),
        ("read", "ledgers"),
    }
    last = await hub.dequeue_and_peek(RECIPIENT, third.bundle_id)
    assert last is None
    assert ids_of([first, second, third]) == ids(saved)
    assert await drain(world.worker()) == []


async def test_dequeues_that_peek_and_plain_ones_drain_the_same_bundles() -> None:
    saved = [event(f"e{i}", message_type="ab"[i % 3 == 0], weight=20 * MB) for i in range(9)]
    plain, combined = World(), World()
    await plain.worker().save(saved)
    await combined.worker().save(saved)
    expected = [ids_of([b]) for b in await drain(plain.worker())]
    assert [ids_of([b]) for b in await drain_dequeuing_with_peek(combined.worker())] == expected


# ---- another worker peeking or dequeuing at any point of the call -------------------------------


async def drain_one_masterdata_bundle(hub: MessageHub, bundle: PeekedBundle) -> PeekedBundle | None:
    shown = await hub.peek(RECIPIENT, ("masterdata",))
    if shown is not None:
        await hub.dequeue(RECIPIENT, shown.bundle_id)
    return shown


OTHERS: dict[str, Callable[[MessageHub, PeekedBundle], Awaitable[Any]]] = {
    # What the other worker does with the actor: peek (a client retrying elsewhere), dequeue the
    # bundle too (a retried dequeue), or dequeue it asking for the next; or peek and dequeue a
    # bundle of the other domain (the bundle A is forming may hold the same events).
    "peek": lambda hub, bundle: hub.peek(RECIPIENT),
    "dequeue": lambda hub, bundle: hub.dequeue(RECIPIENT, bundle.bundle_id),
    "dequeue-and-peek": lambda hub, bundle: hub.dequeue_and_peek(RECIPIENT, bundle.bundle_id),
    "other-domain": drain_one_masterdata_bundle,
}


async def requests_alone(other: str) -> tuple[int, int]:
    """Store and stream requests of the call, and of the other worker's action after it."""
    world = World.with_hooked_streams()
    hub = world.worker()
    await hub.save(two_cabinets())
    bundle = await hub.peek(RECIPIENT)
    assert bundle is not None
    seen: list[Request] = []
    world.store.before = recorder(seen)
    await hub.dequeue_and_peek(RECIPIENT, bundle.bundle_id)
    n_a = len(seen)
    await OTHERS[other](world.worker(), bundle)
    return n_a, len(seen) - n_a


def two_cabinets() -> list[DataAvailable]:
    """Timeseries first (the first bundle), then masterdata and timeseries events in turn: the
    next bundle of every domain after the first is masterdata."""
    return [
        event(f"e{i}", domain="masterdata" if i in (2, 4, 7) else "timeseries", weight=20 * MB)
        for i in range(8)
    ]


@pytest.mark.parametrize("other", sorted(OTHERS))
async def test_every_interleaving_with_another_worker_shows_each_event_once_in_order(other: str) -> None:
    """The actor's first bundle is dequeued, asking for the next (A), on one worker while another
    worker (B) peeks, or dequeues the same bundle, with or without asking for the next. Bound: every
    schedule in which B's store and stream requests run as at most two runs between A's:
    A[..i) B[..j) A[i..i2) B[j..) A[i2..) for 1 <= i <= i2 <= nA + 1, 1 <= j <= nB + 1 (n: requests
    each issues alone). Then the actor drains through both workers in turn. Every event is shown
    exactly once (the bundles answered to A and B count as shown), each cabinet's in order."""
    n_a, n_b = await requests_alone(other)
    saved = two_cabinets()
    runs = 0
    for i in range(1, n_a + 2):
        for i2 in range(i, n_a + 2):
            for j in range(1, n_b + 2):
                runs += 1
                world = World.with_hooked_streams()
                workers = [world.worker(), world.worker()]
                await workers[0].save(saved)
                first = await workers[0].peek(RECIPIENT)
                assert first is not None
                schedule = Preemption(i, j, i2)
                world.store.before = schedule.before
                answers = await schedule.run(
                    partial(workers[0].dequeue_and_peek, RECIPIENT, first.bundle_id),
                    partial(OTHERS[other], workers[1], first),
                )
                world.store.before = None
                where = f"i={i} j={j} i2={i2}: {schedule.trace}"
                assert not any(isinstance(a, BaseException) for a in answers), f"{where}: {answers}"
                shown: dict[str, list[str]] = {first.bundle_id: ids_of([first])}
                for answer in answers:
                    if isinstance(answer, PeekedBundle):
                        shown[answer.bundle_id] = ids_of([answer])  # the same bundle may be answered twice
                for bundle in await drain_in_turn(workers):
                    assert bundle.bundle_id not in shown or ids_of([bundle]) == shown[bundle.bundle_id]
                    shown[bundle.bundle_id] = ids_of([bundle])
                flat = [e for bundle_ids in shown.values() for e in bundle_ids]
                assert sorted(flat) == sorted(ids(saved)), where
                for domain in ("timeseries", "masterdata"):
                    order = [e.id for e in saved if e.origin == domain]
                    assert [e for e in flat if e in set(order)] == order, where
    assert runs == (n_a + 1) * (n_a + 2) // 2 * (n_b + 1)


async def drain_in_turn(workers: list[MessageHub]) -> list[PeekedBundle]:
    """Peek and dequeue (asking for the next) through the workers in turn; the open bundle, if
    one was left, comes first."""
    bundles: list[PeekedBundle] = []
    bundle = await workers[0].peek(RECIPIENT)
    for turn in itertools.count():
        if bundle is None:
            assert await workers[1].peek(RECIPIENT) is None
            return bundles
        assert turn < 50, "not drained"
        bundles.append(bundle)
        bundle = await workers[turn % 2].dequeue_and_peek(RECIPIENT, bundle.bundle_id)
    raise AssertionError("unreachable")


# ---- any write failing or losing its answer ------------------------------------------------------


@pytest.mark.parametrize("lose_answer", [False, True], ids=["write-failed", "answer-lost"])
async def test_dequeues_that_peek_interrupted_at_any_write_and_retried_lose_and_repeat_nothing(
    lose_answer: bool,
) -> None:
    """Every write of a drain (the drawers a dequeue acknowledges and the appends to the actor's
    stream) fails once, before reaching the store or after (its answer lost). The actor repeats the
    call that failed, through the same worker or another; the bundles it is shown hold every event
    once, in order."""
    saved = events("e", 9)
    world = World.with_hooked_streams()
    await world.worker().save(saved)
    writes: list[Request] = []
    world.store.before = count_writes(writes)
    assert ids_of(await drain_dequeuing_with_peek(world.worker())) == ids(saved)
    # 5 bundles over 3 drawers: 3 drawer writes, each when a bundle ends the drawer's events (a
    # bundle leaving events in a drawer records its position in the stream); the first peek's
    # append, then one per dequeue.
    assert len([k for k in kinds(writes) if k[1] == "drawers"]) == 3, kinds(writes)
    assert [k for k in kinds(writes) if k[1] == "streams"] == [("create", "streams")] + [
        ("replace", "streams")
    ] * 5
    for nth in range(1, len(writes) + 1):
        world = World.with_hooked_streams()
        await world.worker().save(saved)
        world.fail_write(nth, lose_answer=lose_answer)
        hub = world.worker()
        drained: list[str] = []
        failures = 0
        bundle: PeekedBundle | None = None
        for _ in range(20):
            try:
                bundle = await hub.peek(RECIPIENT)
                break
            except Injected:
                failures += 1
        while bundle is not None:
            drained += ids_of([bundle])  # an event shown again would show twice
            dequeued = bundle.bundle_id
            try:
                bundle = await hub.dequeue_and_peek(RECIPIENT, dequeued)
            except Injected:
                failures += 1
                hub = world.worker() if nth % 2 else hub  # repeated through this worker or another
                bundle = await hub.dequeue_and_peek(RECIPIENT, dequeued)
        assert failures == 1, nth
        assert drained == ids(saved), f"write {nth}: {drained}"
