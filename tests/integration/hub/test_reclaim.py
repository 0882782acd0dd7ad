"""Reclaiming acknowledged data on the Cosmos endpoint: `hubstream hub gc` reports and deletes the
events and documents of drained drawers; what an actor can still peek stays, and a sweep cut at a
named crash point is finished by the next."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import orjson
import pytest

from app.cosmos import CosmosStore
from app.crashpoints import InjectedFault, armed
from app.hub import HubContainers, MessageHub
from app.settings import Settings
from tests.integration.hub.conftest import DRAWER_CAPACITY, drain, events, ids, open_hub
from tests.support.clock import Clock


async def stored_documents(hub: MessageHub) -> int:
    io = hub.repository.io
    assert isinstance(io, HubContainers)
    counted = 0
    for container in (*io.event_shards, io.drawers):
        counted += sum([1 async for _ in io.read_all(container)])
    return counted


async def gc(cosmos: CosmosStore, *flags: str) -> dict[str, object]:
    """`hubstream hub gc`, run as an operator runs it, on the test's database."""
    env = {**os.environ, "COSMOS_DATABASE": cosmos.database.id, "HUB_DRAWER_CAPACITY": str(DRAWER_CAPACITY)}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli.main", "hub", "gc", *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer: dict[str, object] = orjson.loads(done.stdout)
    return answer


async def test_hub_gc_reclaims_drained_drawers_and_keeps_what_actors_can_peek(
    stack: Settings, cosmos: CosmosStore, unique: str
) -> None:
    hub = await open_hub(stack, cosmos)
    actor = f"gc-{unique}"
    done = events(actor, 3 * DRAWER_CAPACITY)
    await hub.save(done)
    assert await drain(hub, actor) == ids(done)
    waiting = events(actor, 2)
    await hub.save(waiting)
    before = await stored_documents(hub)
    assert before == 3 * DRAWER_CAPACITY + 2 + 4  # events, and the drawers (3 drained, 1 open)

    dry = await gc(cosmos, "--dry-run")
    assert {k: dry[k] for k in ("drawers", "documents", "dryRun")} == {
        "drawers": 3,
        "documents": 3 * DRAWER_CAPACITY + 3,
        "dryRun": True,
    }
    assert await stored_documents(hub) == before

    with armed("hub.reclaim.events", nth=2, action="raise"), pytest.raises(InjectedFault):
        await hub.reclaim()  # cut after the first drawer
    swept = await gc(cosmos)
    assert swept["drawers"] == 2 and swept["bytes"] > 0  # type: ignore[operator]
    assert await stored_documents(hub) == 2 + 1  # the waiting events and their drawer
    assert (await gc(cosmos))["drawers"] == 0
    assert await hub.depth(actor) == {"timeseries": 2}
    assert await drain(hub, actor) == ids(waiting)
    assert (await hub.save(done)).duplicates == len(done)  # the index still knows reclaimed events
    await hub.close()


async def test_a_sweep_drops_voided_claims_once_their_documents_are_deleted(
    stack: Settings, cosmos: CosmosStore, unique: str, clock: Clock
) -> None:
    hub = await open_hub(stack, cosmos)
    actor = f"voids-{unique}"
    finished = events(actor, 2)
    await hub.save(finished)
    dead = events(actor, 3)
    with armed("hub.save.release", nth=1, action="raise"), pytest.raises(InjectedFault):
        await hub.save(dead)  # wrote everything, never released, never retried
    ledger, _ = await hub.repository.ledgers.read(actor)
    [claim] = ledger.claims
    clock.pass_(claim.lease_until_s)
    later = events(actor, 2)
    await hub.save(later)
    ledger, _ = await hub.repository.ledgers.read(actor)
    assert [v[:2] for v in ledger.voids] == [(claim.first_seq, claim.last_seq)]

    assert (await hub.reclaim()).voids == 0  # younger than the dedup window: kept
    clock.advance(stack.hub_dedup_window_s + 1)
    report = await hub.reclaim()
    assert (report.voids, report.documents) == (1, 3 + 3)  # the dead events and their index entries
    ledger, _ = await hub.repository.ledgers.read(actor)
    assert ledger.voids == ()
    assert await hub.depth(actor) == {"timeseries": 4}
    assert await drain(hub, actor) == ids([*finished, *later])
    assert (await hub.save(dead)).saved == 3  # a redelivery is saved: its entries went with the claim
    assert await drain(hub, actor) == ids(dead)
    await hub.close()


async def test_index_entries_carry_the_dedup_window_and_the_sweep_expires_them_on_this_endpoint(
    stack: Settings, cosmos: CosmosStore, unique: str, clock: Clock
) -> None:
    """On Cosmos DB the container's per-item TTL deletes an entry `ttl` seconds after its write; the
    embedded endpoint keeps the setting but expires nothing, so there the sweep does it."""
    settings = stack.model_copy(update={"hub_dedup_window_s": 60})
    hub = await MessageHub.open(settings, store=cosmos)
    io = hub.repository.io
    assert isinstance(io, HubContainers)
    assert (await io.ids.read())["defaultTtl"] == -1
    actor = f"window-{unique}"
    saved = events(actor, 3)
    await hub.save(saved)
    pk = {"@pk": actor}
    entries = await io.query(io.ids, "SELECT * FROM c WHERE c.pk = @pk", actor, pk)
    assert {e["ttl"] for e in entries} == {60}
    await drain(hub, actor)
    clock.now = time.time() + 30  # `_ts` is the endpoint's clock
    await hub.reclaim()
    assert (await hub.save(saved)).duplicates == 3
    clock.now = time.time() + 61
    await hub.reclaim()
    assert await io.query(io.ids, "SELECT * FROM c WHERE c.pk = @pk", actor, pk) == []
    assert (await hub.save(saved)).saved == 3  # after the window: saved again, as documented
    await hub.close()
