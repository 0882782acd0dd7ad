"""The hub repository's concurrency, on the in-memory store: FIFO Peek/Dequeue, idempotent Save,
concurrent saves, saves and dequeues interrupted at any write and retried.

The store (app/hub/memory.py) keeps the Cosmos adapter's rules (etags, If-Match, create conflicts,
batches), so the ledger's claims, the index's idempotency and the drawers' If-Match writes are the
repository's own, checked here without the services.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.crashpoints import InjectedFault, armed
from app.dataavailable import DataAvailable
from app.errors import HubstreamError
from app.hub import MemoryHubStore, MessageHub, SaveResult
from app.hub.documents import ledger_from_doc
from app.hub.errors import SaveInProgress
from app.hub.memory import Request
from app.hub.model import Claim
from tests.support.clock import Clock, hub_clock
from tests.support.waiting import async_wait_until, run_until_idle
from tests.unit.hub.memhub import (
    MB,
    OPTIONS,
    RECIPIENT,
    WRITER,
    Injected,
    Preemption,
    World,
    count_writes,
    drain,
    event,
    events,
    ids,
    ids_of,
    in_order,
)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The repository's clock (claims' leases), moved by the test."""
    return hub_clock(monkeypatch)


async def save_until_done(
    hub: MessageHub, batch: list[DataAvailable], clock: Clock | None = None
) -> SaveResult:
    """Save as the subscription does: retry a retriable failure; a crashed save's claim blocks its
    events until its lease expires (with `clock`, the test lets it expire)."""
    for _ in range(4):
        try:
            return await hub.save(batch)
        except HubstreamError as exc:
            if not exc.retriable:
                raise
            if clock is not None:
                clock.advance(OPTIONS.lease_s + 1)
    raise AssertionError("the save never finished")


# ---- Save, Peek, Dequeue ------------------------------------------------------------------------


async def test_saved_events_are_peeked_fifo_per_cabinet_and_each_once() -> None:
    world = World()
    hub = world.worker()
    series = events("series", 7)
    master = events("master", 3, domain="masterdata", weight=1 * MB)
    other_type = events("other", 2, message_type="other")
    mixed = [series[0], master[0], *series[1:4], other_type[0], *master[1:], *series[4:], other_type[1]]
    assert await hub.save(mixed) == SaveResult(12, 0)
    bundles = await drain(hub)
    drained = ids_of(bundles)
    assert sorted(drained) == sorted(ids(mixed))
    for cabinet in (series, master, other_type):
        assert [i for i in drained if i in ids(cabinet)] == ids(cabinet)
    assert all(len({(s.event.origin, s.event.message_type) for s in b.events}) == 1 for b in bundles)
    # Each bundle starts at the oldest event left (its cabinet's first unacknowledged one).
    left = {stored.seq for b in bundles for stored in b.events}
    for bundle in bundles:
        assert bundle.events[0].seq == min(left)
        left -= {stored.seq for stored in bundle.events}


async def test_peek_repeats_the_open_bundle_and_dequeue_moves_on() -> None:
    world = World()
    hub = world.worker()
    saved = events("e", 5)
    await hub.save(saved)
    first = await hub.peek(RECIPIENT)
    again = await world.worker().peek(RECIPIENT)  # another worker sees the same open bundle
    assert first is not None and again is not None
    assert again.bundle_id == first.bundle_id and ids_of([again]) == ids_of([first]) == ids(saved[:2])
    await hub.dequeue(RECIPIENT, first.bundle_id)
    assert ids_of(await drain(hub)) == ids(saved[2:])
    assert await hub.depth(RECIPIENT) == {}


async def test_saving_the_same_event_ids_again_stores_them_once() -> None:
    world = World()
    hub = world.worker()
    saved = events("e", 4)
    assert await hub.save(saved) == SaveResult(4, 0)
    assert await world.worker().save(saved) == SaveResult(0, 4)  # a redelivery, on another worker
    assert await hub.save([saved[1], *events("f", 1), saved[1]]) == SaveResult(1, 2)
    assert await hub.depth(RECIPIENT) == {"timeseries": 5}
    assert ids_of(await drain(hub)) == ids([*saved, *events("f", 1)])
    assert await hub.save(saved) == SaveResult(0, 4)  # acknowledged ones too
    assert await hub.peek(RECIPIENT) is None


async def test_a_retried_dequeue_is_idempotent() -> None:
    world = World()
    hub = world.worker()
    saved = events("e", 7)
    await hub.save(saved)
    first = await hub.peek(RECIPIENT)
    assert first is not None
    await asyncio.gather(hub.dequeue(RECIPIENT, first.bundle_id), hub.dequeue(RECIPIENT, first.bundle_id))
    await hub.dequeue(RECIPIENT, first.bundle_id)  # the answer was lost: dequeued again
    second = await hub.peek(RECIPIENT)
    assert second is not None and ids_of([second]) == ids(saved[2:4])
    await hub.dequeue(RECIPIENT, second.bundle_id)
    # The repository's acknowledge of an old bundle again (a retry that passed the bundle stream's
    # check) moves nothing back and nothing forward: no write takes effect (its first If-Match
    # attempt from the drawer as peeked is refused, and the fresh read, with the positions the
    # stream holds for drawers not written yet, shows nothing to do).
    deferred = (await hub.bundle_log.load(RECIPIENT)).deferred_acks()
    assert deferred  # the second bundle left events in a drawer: its position waits in the stream
    done: list[Request] = []
    world.store.after = count_writes(done)
    await hub.repository.acknowledge(first.ref, deferred=deferred)
    await world.repository().acknowledge(second.ref, deferred=deferred)
    assert done == []
    world.store.after = None
    assert ids_of(await drain(hub)) == ids(saved[4:])


async def test_a_dequeue_starts_from_the_bundles_its_worker_holds_and_survives_them_being_stale() -> None:
    world = World()
    first_worker, second_worker = world.worker(), world.worker()
    saved = events("e", 8)
    await first_worker.save(saved)
    first = await first_worker.peek(RECIPIENT)
    assert first is not None
    # The worker that answered the peek dequeues without reading the bundle stream again.
    reads = world.streams.requests
    await first_worker.dequeue(RECIPIENT, first.bundle_id)
    assert world.streams.requests == reads + 1  # the append only
    # Another worker peeks the next bundle and dequeues it: the first worker's bundles are stale.
    second = await second_worker.peek(RECIPIENT)
    assert second is not None
    await second_worker.dequeue(RECIPIENT, second.bundle_id)
    # A dequeue of the second bundle repeated through the first worker (a retry after a lost
    # answer) finds it from a fresh read, acknowledges nothing twice, and succeeds.
    done: list[Request] = []
    world.store.after = count_writes(done)
    await first_worker.dequeue(RECIPIENT, second.bundle_id)
    assert done == []
    world.store.after = None
    assert ids_of([first, second, *await drain(first_worker)]) == ids(saved)


async def test_a_save_starting_from_a_stale_known_drawer_never_undoes_a_dequeue() -> None:
    """A worker starts a drawer's compare-and-swap from the version it last wrote; a dequeue on
    another worker changed the drawer since, so that write must be refused and redone from a read."""
    world = World()
    saver, reader = world.worker(), world.worker()
    first = events("a", 1)
    await saver.save(first)  # the drawer as this worker knows it: nothing acknowledged
    bundle = await reader.peek(RECIPIENT)
    assert bundle is not None
    await reader.dequeue(RECIPIENT, bundle.bundle_id)
    later = events("b", 1)
    await saver.save(later)  # into the same drawer (capacity 3), from the stale known version
    assert world.store.counter.etag_conflicts >= 1
    assert ids_of(await drain(reader)) == ids(later)


async def test_a_save_racing_a_dequeue_on_the_same_drawer_loses_no_acknowledgement() -> None:
    world = World()
    hub = world.worker()
    saved = events("e", 2)
    await hub.save(saved)
    bundle = await hub.peek(RECIPIENT)
    assert bundle is not None and ids_of([bundle]) == ids(saved)
    racing = events("r", 1)
    await world.worker().save(racing)  # into the drawer the peek read: its etag is stale now
    conflicts = world.store.counter.etag_conflicts
    await hub.dequeue(RECIPIENT, bundle.bundle_id)
    assert world.store.counter.etag_conflicts > conflicts
    assert ids_of(await drain(hub)) == ids(racing)


# ---- concurrent saves ---------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [False, True], ids=["two-workers", "one-worker"])
async def test_concurrent_saves_for_one_recipient_lose_nothing_and_keep_each_writers_order(
    shared: bool,
) -> None:
    world = World()
    hubs = [world.worker()] * 4 if shared else [world.worker() for _ in range(4)]
    batches = [events(f"w{w}-", 5) + events(f"w{w}-m", 2, domain="masterdata") for w in range(4)]
    results = await asyncio.gather(*(hub.save(batch) for hub, batch in zip(hubs, batches, strict=True)))
    assert results == [SaveResult(7, 0)] * 4
    drained = ids_of(await drain(world.worker()))
    assert sorted(drained) == sorted(i for batch in batches for i in ids(batch))
    assert all(in_order(drained, ids(batch)) for batch in batches)


async def test_concurrent_redeliveries_of_the_same_events_store_them_once() -> None:
    world = World()
    saved = events("e", 6)
    hubs = [world.worker() for _ in range(3)]
    outcomes = await asyncio.gather(*(hub.save(saved) for hub in hubs), return_exceptions=True)
    for hub, outcome in zip(hubs, outcomes, strict=True):
        if isinstance(outcome, SaveInProgress):  # the other save held them: the retry finds them saved
            assert await save_until_done(hub, saved) == SaveResult(0, 6)
        else:
            assert isinstance(outcome, SaveResult), outcome
    assert ids_of(await drain(world.worker())) == ids(saved)


async def test_a_save_holding_its_claim_hides_the_saves_after_it_until_it_releases() -> None:
    """The fence: a peek never shows a later save's events before an earlier, unfinished one's."""
    world = World()
    await world.worker().save(events("old", 1))
    first = events("a", 2)
    later = events("b", 2)
    release = asyncio.Event()
    held = asyncio.Event()

    replaces = 0

    async def hold_before_release(request: Request) -> None:
        # A's ledger replaces: its claim, then its release (hold it there).
        nonlocal replaces
        if WRITER.get() == "A" and request.container == "ledgers" and request.op == "replace":
            replaces += 1
            if replaces == 2:
                held.set()
                await release.wait()

    async def save_as_a() -> SaveResult:
        WRITER.set("A")
        result: SaveResult = await world.worker().save(first)
        return result

    world.store.before = hold_before_release
    saving = asyncio.create_task(save_as_a())
    await held.wait()
    await world.worker().save(later)  # finishes while the first still holds its claim
    assert ids_of(await drain(world.worker())) == ids(events("old", 1))
    release.set()
    await saving
    assert ids_of(await drain(world.worker())) == ids(first + later)


@pytest.mark.parametrize("failing", [False, True], ids=["renewed", "renewal-failed-once"])
async def test_a_save_slower_than_its_lease_renews_its_claim_and_is_not_voided(failing: bool) -> None:
    """A live save keeps its claim by renewing it: another worker's save after the claim's first
    lease has passed (it reaps expired claims) voids nothing, and the slow save finishes. Without
    renewal the first save's range is voided and its release fails with SaveLeaseLost. A renewal
    failing at its crash point (`hub.save.renew`, an I/O error) is tried again a third of a lease
    later, before the lease runs out."""
    world = World(options=dataclasses.replace(OPTIONS, lease_s=1.2))  # renewed every 0.4 s
    slow, later = events("a", 2), events("b", 2)
    go_on = asyncio.Event()

    async def hold_a_events(request: Request) -> None:
        if WRITER.get() == "A" and request.container.startswith("events") and request.is_write:
            await go_on.wait()

    async def save_as_a() -> SaveResult:
        WRITER.set("A")
        result: SaveResult = await world.worker().save(slow)
        return result

    async def claim() -> Claim | None:
        doc = await world.store.read(world.store.ledgers, RECIPIENT, RECIPIENT)
        claims = ledger_from_doc(doc).claims if doc is not None else ()
        return claims[0] if claims else None

    world.store.before = hold_a_events
    with armed("hub.save.renew", nth=1 if failing else 1000, action="raise") as trigger:
        saving = asyncio.create_task(save_as_a())
        first = await async_wait_until(claim, 5, "the slow save's claim")
        assert first is not None
        first_until = first.lease_until_s
        await async_wait_until(lambda: time.time() > first_until + 0.5, 5, "its first lease to pass")
        assert trigger.fired == failing and trigger.hits >= 2
    renewed = await claim()
    assert renewed is not None and renewed.token == first.token
    assert renewed.lease_until_s > time.time()
    assert await world.worker().save(later) == SaveResult(2, 0)
    go_on.set()
    assert await saving == SaveResult(2, 0)
    assert ids_of(await drain(world.worker())) == ids(slow + later)


async def test_a_cancelled_save_stops_renewing_its_claim() -> None:
    """A save that dies (here: cancelled mid-write) leaves its claim to expire: nothing of it keeps
    renewing the claim."""
    world = World(options=dataclasses.replace(OPTIONS, lease_s=0.3))
    held = asyncio.Event()

    async def hold_events(request: Request) -> None:
        if request.container.startswith("events") and request.is_write:
            held.set()
            await asyncio.Event().wait()  # never answers

    world.store.before = hold_events
    before = set(asyncio.all_tasks())
    saving = asyncio.create_task(world.worker().save(events("a", 2)))
    await held.wait()
    assert len(asyncio.all_tasks() - before) >= 2  # the save and its claim keeper
    saving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await saving
    await run_until_idle()
    assert asyncio.all_tasks() - before == set()


# ---- every interleaving of two saves, up to a bound --------------------------------------------

SCENARIOS = {
    # name: (A's events, B's events, whether A and B are one worker)
    "disjoint": (events("a", 2), events("b", 2), False),
    "disjoint-one-worker": (events("a", 2), events("b", 2), True),
    "overlapping": (events("a", 2), [events("a", 2)[1], event("b0")], False),
}


async def solo_requests(a: list[DataAvailable], b: list[DataAvailable]) -> tuple[int, int]:
    """How many store requests A's save issues alone, and B's after it."""
    world = World()
    seen: list[Request] = []

    async def record(request: Request) -> None:
        seen.append(request)

    world.store.before = record
    await world.worker().save(a)
    n_a = len(seen)
    await world.worker().save(b)
    return n_a, len(seen) - n_a


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_every_interleaving_of_two_saves_with_at_most_two_preemptions(scenario: str) -> None:
    """Two saves for one recipient (one cabinet, drawers of 3), run under every schedule in which
    B's store requests run as at most two runs between A's requests: A[..i) B[..j) A[i..i2) B[j..)
    A[i2..), for every 1 <= i <= i2 <= nA + 1 and 1 <= j <= nB + 1, where nA and nB are the requests
    each issues alone (a save that retries issues more; its extra ones run where they fall). That
    includes B entirely before, between any two requests of, and after A, and B split around any
    stretch of A. A save refused as retriable (SaveInProgress) is retried once both ran.

    After each: every event is peeked exactly once, each writer's events in its order (disjoint
    events), and no claim is left in the ledger."""
    a, b, one_worker = SCENARIOS[scenario]
    n_a, n_b = await solo_requests(a, b)
    traces: set[tuple[str, ...]] = set()
    runs = 0
    for i in range(1, n_a + 2):
        for i2 in range(i, n_a + 2):
            for j in range(1, n_b + 2):
                runs += 1
                world = World()
                hub_a = world.worker()
                hub_b = hub_a if one_worker else world.worker()
                schedule = Preemption(i, j, i2)
                world.store.before = schedule.before
                outcomes = await schedule.run(partial(hub_a.save, a), partial(hub_b.save, b))
                world.store.before = None
                traces.add(tuple(schedule.trace))
                where = f"i={i} j={j} i2={i2}: {schedule.trace}"
                for hub, batch, outcome in ((hub_a, a, outcomes[0]), (hub_b, b, outcomes[1])):
                    if isinstance(outcome, BaseException):
                        assert isinstance(outcome, SaveInProgress), f"{where}: {outcome!r}"
                        await save_until_done(hub, batch)
                drained = ids_of(await drain(world.worker()))
                expected = list(dict.fromkeys(ids(a) + ids(b)))
                assert sorted(drained) == sorted(expected), where
                if not set(ids(a)) & set(ids(b)):
                    assert in_order(drained, ids(a)) and in_order(drained, ids(b)), where
                ledger, _ = await world.repository().ledgers.read(RECIPIENT)
                assert ledger.claims == (), where
    assert runs == (n_a + 1) * (n_a + 2) // 2 * (n_b + 1)
    assert len(traces) > n_a + n_b  # the schedules really differ


# ---- a save or a dequeue interrupted at any write, then retried ---------------------------------


async def interrupted_save_setup() -> tuple[World, list[DataAvailable], list[DataAvailable]]:
    """A recipient with a partly filled drawer; the save to interrupt fills it, opens another drawer
    and a new cabinet (three placements, written concurrently)."""
    world = World()
    before = events("pre", 2)
    await world.worker().save(before)
    batch = [event("x3"), event("x4"), event("y1", domain="masterdata"), event("x5")]
    return world, before, batch


async def writes_of_a_solo_save() -> int:
    world, _, batch = await interrupted_save_setup()
    writes: list[Request] = []
    world.store.before = count_writes(writes)
    await world.worker().save(batch)
    return len(writes)


@pytest.mark.parametrize("lose_answer", [False, True], ids=["write-failed", "answer-lost"])
async def test_a_save_interrupted_at_any_write_and_retried_shows_every_event_once(
    clock: Clock, lose_answer: bool
) -> None:
    writes = await writes_of_a_solo_save()
    assert writes >= 8  # claim, index, 3 x (events, drawer), catalog entries, release
    for nth in range(1, writes + 1):
        world, before, batch = await interrupted_save_setup()
        world.fail_write(nth, lose_answer=lose_answer)
        crashed = world.worker()
        with pytest.raises(Injected):
            await crashed.save(batch)
        world.store.before = world.store.after = None
        # The subscription delivers it again, to this worker or another; the claim of the crashed
        # save blocks its events until its lease expires.
        await save_until_done(world.worker() if nth % 2 else crashed, batch, clock)
        clock.advance(OPTIONS.lease_s + 1)  # a crashed claim holds the fence until its lease expires
        drained = ids_of(await drain(world.worker()))
        assert sorted(drained) == sorted(ids([*before, *batch])), f"write {nth}: {drained}"
        assert in_order(drained, ids([*before, batch[0], batch[1], batch[3]])), f"write {nth}: {drained}"
        assert await world.worker().save(batch) == SaveResult(0, 4)


@pytest.mark.parametrize(
    "point", ["hub.save.events", "hub.save.drawer", "hub.save.catalog"], ids=lambda p: p.split(".")[-1]
)
async def test_a_save_failing_at_a_named_crash_point_and_retried_shows_every_event_once(
    clock: Clock, point: str
) -> None:
    world, before, batch = await interrupted_save_setup()
    hub = world.worker()
    with armed(point, nth=2, action="raise") as trigger, pytest.raises(InjectedFault):
        await hub.save(batch)
    assert trigger.fired
    await save_until_done(hub, batch, clock)
    clock.advance(OPTIONS.lease_s + 1)
    drained = ids_of(await drain(hub))
    assert sorted(drained) == sorted(ids(before + batch))
    assert in_order(drained, ids([*before, batch[0], batch[1], batch[3]]))


@pytest.mark.parametrize("lose_answer", [False, True], ids=["write-failed", "answer-lost"])
async def test_dequeues_interrupted_at_any_write_and_retried_lose_and_repeat_nothing(
    lose_answer: bool,
) -> None:
    saved = events("e", 9)
    world = World()
    await world.worker().save(saved)
    writes: list[Request] = []
    world.store.before = count_writes(writes)
    await drain(world.worker())
    total = len(writes)
    assert total == 3  # 5 bundles over 3 drawers: each drawer written once, by the bundle ending it
    for nth in range(1, total + 1):
        world = World()
        await world.worker().save(saved)
        world.fail_write(nth, lose_answer=lose_answer)
        hub = world.worker()
        drained: list[str] = []
        failures = 0
        for _ in range(20):
            try:
                bundle = await hub.peek(RECIPIENT)
            except Injected:
                failures += 1
                continue
            if bundle is None:
                break
            drained += ids_of([bundle])  # an acknowledged event peeked again would show twice
            try:
                await hub.dequeue(RECIPIENT, bundle.bundle_id)
            except Injected:
                failures += 1
                hub = world.worker() if nth % 2 else hub  # retried by this worker or another
                await hub.dequeue(RECIPIENT, bundle.bundle_id)
        assert failures == 1, nth
        assert drained == ids(saved), f"write {nth}: {drained}"


async def test_a_dequeue_failing_at_each_named_crash_point_and_retried_keeps_the_order() -> None:
    for point in ("hub.ack.drawer",):
        world = World()
        saved = events("e", 7)
        hub = world.worker()
        await hub.save(saved)
        drained: list[str] = []
        with armed(point, nth=2, action="raise") as trigger:
            for _ in range(10):
                bundle = await hub.peek(RECIPIENT)
                if bundle is None:
                    break
                drained += ids_of([bundle])
                try:
                    await hub.dequeue(RECIPIENT, bundle.bundle_id)
                except InjectedFault:
                    await hub.dequeue(RECIPIENT, bundle.bundle_id)
        assert trigger.fired, point
        assert drained == ids(saved), point


# ---- random deliveries ---------------------------------------------------------------------------

deliveries = st.lists(
    st.tuples(
        st.integers(0, 1),  # worker
        st.lists(
            st.tuples(
                st.sampled_from(["timeseries", "masterdata"]), st.sampled_from(["a", "b"]), st.booleans()
            ),
            min_size=1,
            max_size=4,
        ),
        st.booleans(),  # delivered twice
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deliveries, st.booleans())
def test_random_deliveries_by_two_concurrent_workers_are_peeked_once_in_each_workers_order(
    plan: list[tuple[int, list[tuple[str, str, bool]], bool]], atomic: bool
) -> None:
    """Each worker saves its deliveries in turn (some twice, a redelivery), both workers at once;
    a drain then shows every event once, each worker's events of a cabinet in its order."""

    async def run() -> None:
        world = World(store=MemoryHubStore(atomic_batches=atomic))
        workers = [world.worker(), world.worker()]
        per_worker: list[list[list[DataAvailable]]] = [[], []]
        for n, (worker, specs, twice) in enumerate(plan):
            batch = [
                DataAvailable(
                    str(uuid.uuid5(uuid.NAMESPACE_OID, f"{n}-{k}")),
                    RECIPIENT,
                    domain,
                    message_type,
                    30 * MB if heavy else MB,
                    bundleable=not heavy or k % 2 == 0,
                )
                for k, (domain, message_type, heavy) in enumerate(specs)
            ]
            per_worker[worker] += [batch, batch] if twice else [batch]

        async def deliver(worker: int) -> None:
            for batch in per_worker[worker]:
                await save_until_done(workers[worker], batch)

        await asyncio.gather(deliver(0), deliver(1))
        drained = await drain(world.worker())
        got = ids_of(drained)
        wanted = [e for batches in per_worker for batch in batches for e in batch]
        assert sorted(got) == sorted(set(ids(wanted)))
        for batches in per_worker:
            mine = [e for batch in batches for e in batch]
            for cabinet in {(e.origin, e.message_type) for e in mine}:
                in_cabinet = list(dict.fromkeys(e.id for e in mine if (e.origin, e.message_type) == cabinet))
                assert in_order(got, in_cabinet)
        for bundle in drained:
            assert sum(s.event.weight for s in bundle.events) <= 50 * MB or len(bundle.events) == 1

    asyncio.run(run())


@pytest.mark.parametrize("lose_answer", [False, True], ids=["write-failed", "answer-lost"])
async def test_a_save_that_fails_and_is_never_retried_hides_nothing_of_a_later_save(
    clock: Clock, lose_answer: bool
) -> None:
    """A save fails at any write after its claim and is given up (its caller never retries); while
    its lease still holds, another save lands in the same drawer. Once the lease expires, the actor
    peeks every event of the second save and the depth counts exactly those."""
    writes = await writes_of_a_solo_save()
    for nth in range(2, writes + 1):  # the first write is the claim: nothing is held before it
        world, _, batch = await interrupted_save_setup()
        await drain(world.worker())  # the drawer's earlier events are acknowledged
        world.fail_write(nth, lose_answer=lose_answer)
        with pytest.raises(Injected):
            await world.worker().save(batch)
        world.store.before = world.store.after = None
        later = [event("z1"), event("z2", domain="masterdata")]
        assert await world.worker().save(later) == SaveResult(2, 0)
        clock.advance(OPTIONS.lease_s + 1)
        hub = world.worker()
        assert await hub.depth(RECIPIENT) == {"timeseries": 1, "masterdata": 1}, f"write {nth}"
        drained = ids_of(await drain(hub))
        assert sorted(drained) == sorted(ids(later)), f"write {nth}: {drained}"
