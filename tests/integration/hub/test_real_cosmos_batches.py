"""The hub's saves under real Cosmos DB's transactional batches (through the real azure-cosmos SDK
and a transport that answers as real Cosmos DB does): a batch of index creates that meets an
existing entry applies nothing, where the embedded endpoint keeps the creates before it. A save
racing another save of some of the same events (a redelivery) gives its claim back, plans again
from the index and places the rest once; the actor peeks every event once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from app.cosmos import open_cosmos
from app.hub import MessageHub
from app.settings import Settings
from tests.integration.hub.conftest import DRAWER_CAPACITY, drain, events, ids
from tests.support.cosmos_semantics import CosmosSemantics

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture
async def real_hub(stack: Settings, unique: str) -> AsyncIterator[tuple[CosmosSemantics, MessageHub]]:
    transport = CosmosSemantics(connection_verify=False)
    store = await open_cosmos(stack, database=f"hubsem-{unique}", transport=transport)
    settings = stack.model_copy(update={"hub_drawer_capacity": DRAWER_CAPACITY})
    hub = await MessageHub.open(settings, store=store)
    yield transport, hub
    await hub.close()
    await store.client.delete_database(store.database.id)
    await store.close()


async def test_a_racing_save_refused_whole_by_the_index_batch_places_the_rest_once(
    real_hub: tuple[CosmosSemantics, MessageHub], unique: str
) -> None:
    transport, hub = real_hub
    actor = f"race-{unique}"
    batch = events(actor, 10)
    saves = hub.repository.saves
    write_index = saves._write_index
    held, go = asyncio.Event(), asyncio.Event()

    async def first_held(*args: Any, **kwargs: Any) -> bool:
        if not held.is_set():  # the first save stops right before its index write
            held.set()
            await go.wait()
        return await write_index(*args, **kwargs)

    saves._write_index = first_held  # type: ignore[method-assign]
    try:
        first = asyncio.create_task(hub.save(batch))
        await held.wait()
        second = await hub.save(batch[5:])  # indexes events 5-9 while the first waits
        go.set()
        result = await first
    finally:
        saves._write_index = write_index  # type: ignore[method-assign]
    assert transport.rolled_back >= 1, "the first save's index batch met events 5-9 and applied nothing"
    assert (second.saved, result.saved, result.duplicates) == (5, 5, 5)
    assert await drain(hub, actor) == ids(batch[5:]) + ids(batch[:5])
