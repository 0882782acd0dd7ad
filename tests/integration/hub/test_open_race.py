"""Workers that open the hub at the same moment on a fresh database: every one of them opens it.

Before, the SDK's create-if-not-exists (a read, then a create) lost the race with another
worker's create and raised CosmosResourceExistsError out of the first batch of every shard: on
a fresh stack the main job's first deliveries failed and sidelined their groups' later events
through the retry topic (288 failures, 48,195 retries in a 200,000-event run)."""

from __future__ import annotations

import asyncio
import uuid

from app.cosmos import open_cosmos
from app.hub import MessageHub
from app.settings import Settings

WORKERS = 6


async def test_workers_opening_the_hub_at_once_on_a_fresh_database_all_open_it(stack: Settings) -> None:
    database = f"test-race-{uuid.uuid4().hex[:10]}"
    stores = await asyncio.gather(*(open_cosmos(stack, database) for _ in range(WORKERS)))
    try:
        opened = await asyncio.gather(
            *(MessageHub.open(stack, store=store) for store in stores), return_exceptions=True
        )
        failures = [repr(o) for o in opened if isinstance(o, BaseException)]
        assert failures == [], "a worker failed to open the hub another one was creating"
        for hub in opened:
            assert isinstance(hub, MessageHub)
            await hub.close()
    finally:
        await stores[0].client.delete_database(database)
        await asyncio.gather(*(store.close() for store in stores))
