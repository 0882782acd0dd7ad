"""Concurrent dequeues (etag conflicts), concurrent peeks, and the fence against a slow bulk save."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from app.hub import MessageHub
from app.hub.cosmos_io import HubContainers
from tests.integration.hub.conftest import events, ids

MB = 1024 * 1024


async def test_concurrent_dequeues_and_a_racing_save_lose_no_acknowledgement(
    hub: MessageHub, unique: str
) -> None:
    actor = f"race-{unique}"
    # The series bundle ends its drawer's events, so its dequeue writes the drawer (one that leaves
    # events behind records the position in the actor's stream and writes nothing to race with).
    series = events(actor, 2, weight=20 * MB)
    master = events(actor, 2, domain="masterdata")
    await hub.save(series + master)
    series_bundle = await hub.peek(actor, ("timeseries",))
    master_bundle = await hub.peek(actor, ("masterdata",))
    assert series_bundle is not None and master_bundle is not None
    assert ids(series_bundle.events) == ids(series) and ids(master_bundle.events) == ids(master)

    io = hub.repository.io
    real_read = io.read
    racing = events(actor, 1)
    injected = asyncio.Event()

    async def read_then_race(container: Any, doc_id: str, partition_key: str) -> Any:
        doc = await real_read(container, doc_id, partition_key)
        if container is io.drawers and doc is not None and not injected.is_set():
            injected.set()
            await hub.save(racing)  # changes this very drawer after the dequeue read it
        return doc

    io.read = read_then_race  # type: ignore[method-assign]
    conflicts_before = io.counter.etag_conflicts
    try:
        await asyncio.gather(
            hub.dequeue(actor, series_bundle.bundle_id),
            hub.dequeue(actor, master_bundle.bundle_id),
            hub.dequeue(actor, series_bundle.bundle_id),  # the same bundle twice at once
        )
    finally:
        io.read = real_read  # type: ignore[method-assign]
    assert injected.is_set() and io.counter.etag_conflicts > conflicts_before
    rest = await hub.peek(actor)
    # Nothing acknowledged comes back and nothing saved meanwhile is lost (same cabinet: one bundle).
    assert rest is not None and ids(rest.events) == ids(racing)
    await hub.dequeue(actor, rest.bundle_id)
    assert await hub.peek(actor) is None


async def test_concurrent_peeks_record_one_bundle(hub: MessageHub, unique: str) -> None:
    actor = f"peeks-{unique}"
    await hub.save(events(actor, 4))
    bundles = await asyncio.gather(*(hub.peek(actor) for _ in range(4)))
    assert all(b is not None for b in bundles)
    assert len({b.bundle_id for b in bundles if b is not None}) == 1
    state = await hub.bundle_log.load(actor)
    assert len(state.open) == 1


async def test_a_peek_during_a_slow_bulk_save_never_sees_part_of_it(hub: MessageHub, unique: str) -> None:
    actor = f"fence-{unique}"
    visible = events(actor, 3)
    await hub.save(visible)
    io = cast(HubContainers, hub.repository.io)  # the Cosmos store, with its event containers
    real_bulk = io.bulk_create
    written = asyncio.Event()
    finish = asyncio.Event()

    async def slow_bulk(container: Any, partition_key: str, docs: Any) -> None:
        await real_bulk(container, partition_key, docs)
        if container in io.event_shards:
            written.set()
            await finish.wait()  # the save has written these events but has not finished

    io.bulk_create = slow_bulk  # type: ignore[method-assign]
    slow = events(actor, 8)
    try:
        saving = asyncio.create_task(hub.save(slow))
        await written.wait()
        ledger, _ = await hub.repository.ledgers.read(actor)
        assert ledger.claims and ledger.fence < ledger.claims[0].first_seq
        during = await hub.peek(actor)
        assert not saving.done()
        finish.set()
        await saving
    finally:
        finish.set()
        io.bulk_create = real_bulk  # type: ignore[method-assign]
    assert during is not None and ids(during.events) == ids(visible)  # none of the half-written save
    await hub.dequeue(actor, during.bundle_id)
    after = await hub.peek(actor)
    assert after is not None and ids(after.events) == ids(slow)
