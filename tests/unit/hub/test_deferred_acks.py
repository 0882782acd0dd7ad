"""Acknowledgements recorded in the actor's stream instead of written to the drawers.

A dequeue that leaves events in a drawer records the drawer's new position with the append to
the actor's stream (`DeferredAck`); every reader applies it to the stored drawer. The promise:
an actor sees exactly what it would see if every acknowledgement were written at once. Checked
by running the same schedule twice, once deferring and once writing every drawer
(MAX_DEFERRED_DRAWERS = 0), and comparing what the actor is shown, the depth after every step,
and the drawers at the end (stored, with what the stream holds for them applied).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.hub import HubRepository, MessageHub, PeekedBundle, acknowledge
from app.hub.documents import drawer_from_doc
from app.hub.model import DrawerState, apply_deferred
from tests.unit.hub.memhub import RECIPIENT, World, drain, event, ids_of

# save:a / save:b: two new events of cabinet a or b (a drawer holds 3, a bundle 2);
# deq:w: worker w dequeues the open bundle (peeking one first if none is open);
# dqp:w: worker w dequeues the open bundle and peeks the next in the same call (or just peeks).
STEPS = ("save:a", "save:b", "deq:0", "deq:1", "dqp:0", "dqp:1")
SHORT_STEPS = ("save:a", "save:b", "deq:0", "deq:1", "dqp:1")


class Actor:
    """One actor's drain over two workers, recording everything it is shown."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.workers = [world.worker(), world.worker()]
        self.open: PeekedBundle | None = None
        self.shown: list[str] = []
        self.depths: list[dict[str, int]] = []
        self.saved = 0

    def _show(self, bundle: PeekedBundle | None) -> None:
        self.open = bundle
        if bundle is not None:
            self.shown += ids_of([bundle])

    async def step(self, step: str) -> None:
        kind, arg = step.split(":")
        if kind == "save":
            batch = [event(f"e{self.saved + i}", message_type=arg) for i in range(2)]
            self.saved += 2
            await self.workers[0].save(batch)
        else:
            hub = self.workers[int(arg)]
            if self.open is None:
                self._show(await hub.peek(RECIPIENT))
                if kind == "dqp" or self.open is None:
                    self.depths.append(await self._depth())
                    return
            dequeued = self.open.bundle_id
            if kind == "deq":
                await hub.dequeue(RECIPIENT, dequeued)
                self.open = None
            else:
                self._show(await hub.dequeue_and_peek(RECIPIENT, dequeued))
        self.depths.append(await self._depth())

    async def _depth(self) -> dict[str, int]:
        return await self.world.worker().depth(RECIPIENT)

    async def finish(self) -> None:
        hub: MessageHub = self.workers[0]
        if self.open is not None:
            await hub.dequeue(RECIPIENT, self.open.bundle_id)
        self.shown += ids_of(await drain(self.world.worker()))

    async def drawers(self) -> dict[tuple[str, int], DrawerState]:
        """The drawers as the actor's acknowledgements made them, by cabinet and ordinal."""
        state = await self.workers[0].bundle_log.load(RECIPIENT)
        deferred = state.deferred_acks()
        found: dict[tuple[str, int], DrawerState] = {}
        for doc in self.world.store.drawers.documents():
            drawer = apply_deferred(drawer_from_doc(doc), deferred.get(doc["id"]))
            found[(drawer.cabinet.message_type, drawer.ordinal)] = drawer
        return found


def comparable(drawer: DrawerState) -> tuple[Any, ...]:
    return (drawer.last_seq, drawer.ack_seq, drawer.unacked_from, drawer.used, drawer.acked)


async def run(schedule: tuple[str, ...], bound: int, monkeypatch: pytest.MonkeyPatch) -> Actor:
    monkeypatch.setattr(acknowledge, "MAX_DEFERRED_DRAWERS", bound)
    actor = Actor(World())
    await actor.workers[0].save([event("first0", message_type="a"), event("first1", message_type="b")])
    for step in schedule:
        await actor.step(step)
    await actor.finish()
    return actor


async def check(schedule: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, bound: int = 16) -> None:
    deferring = await run(schedule, bound, monkeypatch)
    writing = await run(schedule, 0, monkeypatch)
    assert len(set(writing.shown)) == len(writing.shown) == writing.saved + 2, schedule
    assert deferring.shown == writing.shown, schedule
    assert deferring.depths == writing.depths, schedule
    after_deferring, after_writing = await deferring.drawers(), await writing.drawers()
    assert after_deferring.keys() == after_writing.keys(), schedule
    for key, drawer in after_deferring.items():
        assert comparable(drawer) == comparable(after_writing[key]), (schedule, key)


async def test_every_schedule_of_four_steps_shows_and_leaves_what_writing_every_drawer_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bound: every sequence of 4 steps over 5 kinds (5^4 = 625): saves into drawers whose
    position waits in the stream, plain dequeues on either worker, dequeues that peek on one."""
    for schedule in itertools.product(SHORT_STEPS, repeat=4):
        await check(schedule, monkeypatch)


@settings(max_examples=100, deadline=None)
@given(schedule=st.lists(st.sampled_from(STEPS), min_size=5, max_size=16), bound=st.integers(1, 3))
async def test_longer_schedules_with_few_deferred_drawers_allowed_show_what_writing_does(
    schedule: list[str], bound: int
) -> None:
    """Longer schedules, with at most `bound` drawers deferred (beyond, a dequeue writes)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        await check(tuple(schedule), monkeypatch, bound)


async def test_a_deferred_position_is_written_with_the_bundle_that_ends_the_drawer() -> None:
    world = World()
    hub = world.worker()
    await hub.save([event(f"e{i}") for i in range(3)])  # one full drawer, bundles of 2 and 1
    first = await hub.peek(RECIPIENT)
    assert first is not None
    second = await hub.dequeue_and_peek(RECIPIENT, first.bundle_id)
    assert second is not None
    (stored,) = world.store.drawers.documents()
    assert drawer_from_doc(stored).ack_seq == 0  # the first bundle's position waits in the stream
    (waiting,) = (await hub.bundle_log.load(RECIPIENT)).deferred
    assert (waiting.ack_seq, waiting.acked) == (first.ref.slices[0].last_seq, 2)
    await hub.dequeue(RECIPIENT, second.bundle_id)
    # The second bundle ends the drawer's events: the full drawer is written as drained (and left
    # for the reclaim sweep), and the stream holds nothing for it any more.
    (stored,) = world.store.drawers.documents()
    assert drawer_from_doc(stored).ack_seq == second.ref.slices[0].last_seq
    assert drawer_from_doc(stored).unacked_from is None
    assert (await hub.bundle_log.load(RECIPIENT)).deferred == ()


async def test_a_worker_with_deferral_off_honours_recorded_positions_and_writes_them() -> None:
    """HUB_DEFER_ACKS=false (workers of an older version run beside this one): such a worker
    defers nothing, applies the positions another worker recorded, and writes them with its
    dequeue of the drawer's next bundle."""
    world = World()
    deferring = world.worker()
    writing = world.worker(HubRepository(world.store, replace(world.options, defer_acks=False)))
    saved = [event(f"e{i}") for i in range(3)]  # one full drawer, bundles of 2 and 1
    await deferring.save(saved)
    first = await deferring.peek(RECIPIENT)
    assert first is not None
    await deferring.dequeue(RECIPIENT, first.bundle_id)
    assert len((await writing.bundle_log.load(RECIPIENT)).deferred) == 1
    (stored,) = world.store.drawers.documents()
    assert drawer_from_doc(stored).ack_seq == 0
    second = await writing.peek(RECIPIENT)
    assert second is not None and ids_of([second]) == [saved[2].id]
    assert await writing.depth(RECIPIENT) == {"timeseries": 1}
    await writing.dequeue(RECIPIENT, second.bundle_id)
    (stored,) = world.store.drawers.documents()  # written: full and drained
    assert drawer_from_doc(stored).unacked_from is None and drawer_from_doc(stored).acked == 3
    assert (await writing.bundle_log.load(RECIPIENT)).deferred == ()
    assert await drain(deferring) == []


async def test_with_deferral_off_a_dequeue_leaving_events_in_a_drawer_writes_it() -> None:
    world = World()
    writing = world.worker(HubRepository(world.store, replace(world.options, defer_acks=False)))
    saved = [event(f"e{i}") for i in range(3)]
    await writing.save(saved)
    first = await writing.peek(RECIPIENT)
    assert first is not None and first.ref.slices[-1].next_seq is not None
    await writing.dequeue(RECIPIENT, first.bundle_id)
    (stored,) = world.store.drawers.documents()
    assert drawer_from_doc(stored).ack_seq == first.ref.slices[-1].last_seq
    assert (await writing.bundle_log.load(RECIPIENT)).deferred == ()
    assert ids_of(await drain(writing)) == [saved[2].id]
