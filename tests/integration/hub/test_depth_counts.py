"""The hub's depth over every actor from the counts (`hubstream hub depth`), on the Cosmos endpoint:
equal to each actor's depth queried from its drawers, after saves (one dying before its release),
peeks and dequeues."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import orjson
import pytest

from app.cosmos import CosmosStore
from app.crashpoints import InjectedFault, armed
from app.settings import Settings
from tests.integration.hub.conftest import events, open_hub
from tests.support.clock import Clock


async def test_the_counted_depth_of_every_actor_equals_the_queried_one(
    stack: Settings, cosmos: CosmosStore, unique: str, clock: Clock
) -> None:
    hub = await open_hub(stack, cosmos)
    actors = [f"count-{i}-{unique}" for i in range(3)]
    for n, actor in enumerate(actors):
        await hub.save(events(actor, 4 + n) + events(actor, 2, domain="masterdata"))
    with armed("hub.save.release", nth=1, action="raise"), pytest.raises(InjectedFault):
        await hub.save(events(actors[0], 3))  # never released: never counted, its claim voided
    ledger, _ = await hub.repository.ledgers.read(actors[0])
    clock.pass_(max(c.lease_until_s for c in ledger.claims))
    for actor in actors[:2]:
        bundle = await hub.peek(actor)
        assert bundle is not None
        await hub.dequeue(actor, bundle.bundle_id)
    queried = {actor: await hub.depth(actor) for actor in actors}
    counted = await hub.depths()
    assert {a: dict(counted.by_actor[a]) for a in actors} == queried
    await hub.close()

    env = {**os.environ, "COSMOS_DATABASE": cosmos.database.id}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli.main", "hub", "depth", "--top", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    printed = orjson.loads(done.stdout)
    assert printed["total"] == sum(sum(d.values()) for d in queried.values())
    assert printed["actors"] == 3 and len(printed["top"]) == 2 and printed["notMeasured"] == 0
