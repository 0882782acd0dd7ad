"""The hub's storage stays bounded however long it runs (in memory; tests/support/hub_cycles.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.clock import Clock, hub_clock
from tests.support.hub_cycles import run_cycles
from tests.unit.hub.memhub import OPTIONS, RECIPIENT, World

WINDOW_S = 100
BOUNDED = replace(OPTIONS, dedup_window_s=WINDOW_S, expire_index_by_sweep_for_embedded_cosmos=True)
# Per recipient, two cabinets: each one's last drawer and the one before it, with their events.
PER_RECIPIENT = 2 * 2 * (BOUNDED.drawer_capacity + 1)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return hub_clock(monkeypatch)


async def test_storage_stays_within_the_unacknowledged_events_plus_a_constant(clock: Clock) -> None:
    world = World(options=BOUNDED)
    world.store.clock = clock.time

    async def stored() -> int:
        events = sum(len(c.documents()) for c in world.store.event_shards)
        return events + len(world.store.drawers.documents()) + len(world.store.ids.documents())

    largest = await run_cycles(
        world.worker(),
        (RECIPIENT, "5790000000006"),
        40,
        stored=stored,
        pass_window=lambda: clock.advance(BOUNDED.lease_s + WINDOW_S + 1),
        per_recipient=PER_RECIPIENT,
    )
    assert largest > 0  # last drawers were kept at times: the bound is not met trivially
