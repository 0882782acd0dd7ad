"""A MessageHub on a fresh Cosmos database per test, with small drawers so few events span many."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import pytest_asyncio

from app.cosmos import CosmosStore
from app.dataavailable import DataAvailable
from app.hub import MessageHub
from app.hub.documents import catalog_from_doc, drawer_from_doc
from app.hub.model import CatalogEntry, DrawerState, apply_deferred
from app.settings import Settings
from tests.support.clock import Clock, hub_clock

DRAWER_CAPACITY = 5


async def open_hub(stack: Settings, cosmos: CosmosStore) -> MessageHub:
    """A hub as one worker opens it (its own repository), with the tests' small drawers."""
    settings = stack.model_copy(update={"hub_drawer_capacity": DRAWER_CAPACITY, "hub_read_page_size": 4})
    return await MessageHub.open(settings, store=cosmos)


@pytest_asyncio.fixture
async def hub(stack: Settings, cosmos: CosmosStore) -> AsyncIterator[MessageHub]:
    opened = await open_hub(stack, cosmos)
    yield opened
    await opened.close()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The repositories' clock (claims' leases), moved by the test instead of waited for."""
    return hub_clock(monkeypatch)


def events(
    recipient: str,
    n: int,
    *,
    domain: str = "timeseries",
    message_type: str = "mt",
    weight: int = 1024,
    bundleable: bool = True,
) -> list[DataAvailable]:
    return [
        DataAvailable(str(uuid.uuid4()), recipient, domain, message_type, weight, bundleable)
        for _ in range(n)
    ]


async def catalog(hub: MessageHub, recipient: str, domain: str = "timeseries") -> list[CatalogEntry]:
    io = hub.repository.io
    pk = f"{recipient}|{domain}"
    docs = await io.query(io.catalog, "SELECT * FROM c WHERE c.pk = @pk", pk, {"@pk": pk})
    return sorted((catalog_from_doc(d) for d in docs), key=lambda e: e.seq)


async def drawers(
    hub: MessageHub,
    recipient: str,
    domain: str = "timeseries",
    message_type: str = "mt",
    *,
    stored: bool = False,
) -> list[DrawerState]:
    """The cabinet's drawers as the actor's acknowledgements made them: the stored documents with
    the positions its stream holds for drawers not written yet (or as stored, `stored`)."""
    io = hub.repository.io
    pk = f"{recipient}|{domain}|{message_type}"
    docs = await io.query(io.drawers, "SELECT * FROM c WHERE c.pk = @pk", pk, {"@pk": pk})
    deferred = {} if stored else (await hub.bundle_log.load(recipient)).deferred_acks()
    found = (apply_deferred(drawer_from_doc(d), deferred.get(d["id"])) for d in docs)
    return sorted(found, key=lambda d: d.ordinal)


def ids(items: Sequence[Any]) -> list[str]:
    return [getattr(i, "event", i).id for i in items]


async def drain(hub: MessageHub, actor: str) -> list[str]:
    """Peek and dequeue until nothing is left: the ids of the events shown, in the order shown."""
    seen: list[str] = []
    while (bundle := await hub.peek(actor)) is not None:
        seen += ids(bundle.events)
        await hub.dequeue(actor, bundle.bundle_id)
    return seen
