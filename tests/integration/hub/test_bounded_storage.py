"""The hub's storage stays bounded however long it runs, on the Cosmos endpoint: cycles of saves
(some dying before their release), peeks, dequeues and reclaim sweeps (tests/support/hub_cycles.py).
A few cycles in every suite, many under `-m soak`."""

from __future__ import annotations

import time

import pytest

from app.cosmos import CosmosStore
from app.hub import HubContainers, MessageHub
from app.settings import Settings
from tests.integration.hub.conftest import DRAWER_CAPACITY
from tests.support.clock import Clock
from tests.support.hub_cycles import run_cycles
from tests.support.soak import first_in_every_suite

WINDOW_S = 60
# Per recipient, two cabinets: each one's last drawer and the one before it, with their events.
PER_RECIPIENT = 2 * 2 * (DRAWER_CAPACITY + 1)


@pytest.mark.parametrize("cycles", first_in_every_suite([8, 200], keep=1))
async def test_storage_stays_within_the_unacknowledged_events_plus_a_constant(
    stack: Settings, cosmos: CosmosStore, unique: str, clock: Clock, cycles: int
) -> None:
    settings = stack.model_copy(
        update={"hub_drawer_capacity": DRAWER_CAPACITY, "hub_dedup_window_s": WINDOW_S}
    )
    hub = await MessageHub.open(settings, store=cosmos)
    io = hub.repository.io
    assert isinstance(io, HubContainers)
    clock.now = time.time()

    async def stored() -> int:
        containers = (*io.event_shards, io.drawers, io.ids)
        return sum([sum([1 async for _ in io.read_all(c)]) for c in containers])

    def pass_window() -> None:  # `_ts` is the endpoint's clock; leases and voids are the hub's
        clock.now = max(clock.now, time.time()) + settings.hub_save_lease_s + WINDOW_S + 1

    largest = await run_cycles(
        hub,
        (f"a-{unique}", f"b-{unique}"),
        cycles,
        stored=stored,
        pass_window=pass_window,
        per_recipient=PER_RECIPIENT,
    )
    assert largest > 0
    await hub.close()
