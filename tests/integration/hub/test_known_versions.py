"""Two workers saving for the same recipient in turn: each starts its ledger and drawer
compare-and-swaps from the versions it knows, which the other one's saves made stale. The stale
versions cost refused writes (412) and reads, never a lost or reordered event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from app.cosmos import CosmosStore
from app.hub import MessageHub
from app.hub.documents import ledger_from_doc
from app.hub.ports import HubStore
from app.settings import Settings
from tests.integration.hub.conftest import drain, events, open_hub


async def read_doc(io: HubStore[Any], actor: str) -> dict[str, Any]:
    """The actor's ledger document (there is one once it saved)."""
    doc = await io.read(io.ledgers, actor, actor)
    assert doc is not None
    return doc


@pytest_asyncio.fixture
async def other_worker(stack: Settings, cosmos: CosmosStore) -> AsyncIterator[MessageHub]:
    opened = await open_hub(stack, cosmos)
    yield opened
    await opened.close()


async def test_saves_in_turn_from_two_workers_keep_every_event_in_order(
    hub: MessageHub, other_worker: MessageHub, unique: str
) -> None:
    actor = f"turns-{unique}"
    batches = [events(actor, 3) for _ in range(6)]  # 18 events in drawers of 5: some span two
    conflicts_before = hub.repository.io.counter.etag_conflicts
    for index, batch in enumerate(batches):
        await (hub if index % 2 == 0 else other_worker).save(batch)
    assert hub.repository.io.counter.etag_conflicts > conflicts_before, (
        "the first worker's known ledger went stale when the other saved: its next write is refused"
    )
    io = other_worker.repository.io
    voids = ledger_from_doc(await read_doc(io, actor)).voids
    again = await other_worker.save(batches[2])  # a redelivery to the worker that did not save it
    assert (again.saved, again.duplicates) == (0, 3)
    assert ledger_from_doc(await read_doc(io, actor)).voids == voids, (
        "a redelivery claims nothing, so it leaves no void range in the ledger (which keeps them all)"
    )

    saved = [e.id for batch in batches for e in batch]
    assert await drain(hub, actor) == saved, "each event once, in save order"
