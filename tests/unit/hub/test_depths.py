"""The hub's depth from counts (app/hub/depths.py) against the depth queried from the drawers, over
random saves (some dying before their release, some redelivered), peeks and dequeues of two
actors through two workers; and a recipient an older version wrote is queried instead."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from app.crashpoints import InjectedFault, armed
from tests.support.clock import Clock, hub_clock
from tests.unit.hub.memhub import OPTIONS, RECIPIENT, World, event

OTHER = "5790000000006"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return hub_clock(monkeypatch)


@pytest.mark.parametrize("seed", range(6))
async def test_counted_depth_equals_the_queried_depth_at_every_step(clock: Clock, seed: int) -> None:
    rng = random.Random(seed)
    world = World()
    workers = [world.worker(), world.worker()]
    saved: list = []  # type: ignore[type-arg]
    for step in range(30):
        hub = rng.choice(workers)
        recipient = rng.choice((RECIPIENT, OTHER))
        action = rng.random()
        if action < 0.45:
            batch = [
                replace(
                    event(
                        f"e{seed}-{step}-{i}", domain=rng.choice(("timeseries", "masterdata")), weight=1024
                    ),
                    recipient=recipient,
                )
                for i in range(rng.randint(1, 5))
            ]
            if rng.random() < 0.2:
                with armed("hub.save.release", nth=1, action="raise"), pytest.raises(InjectedFault):
                    await hub.save(batch)
            else:
                await hub.save(batch)
                saved.append(batch)
        elif action < 0.55 and saved:
            again = rng.choice(saved)  # a redelivery: duplicates, nothing counted twice
            await hub.save(again)
        else:
            bundle = await hub.peek(recipient)
            if bundle is not None and rng.random() < 0.8:
                await hub.dequeue(recipient, bundle.bundle_id)
        clock.advance(OPTIONS.lease_s + 1)  # a dead save's claim is voided: the fence passes it
        depths = await workers[0].depths()
        for actor in (RECIPIENT, OTHER):
            queried = await workers[1].depth(actor)
            assert dict(depths.by_actor.get(actor, {})) == queried, f"step {step}, {actor}"
        assert depths.queried == 0 and depths.not_measured == ()
        assert depths.total == sum(sum(d.values()) for d in depths.by_actor.values())


async def test_a_recipient_an_older_version_wrote_is_queried_instead() -> None:
    world = World()
    hub = world.worker()
    await hub.save([event(f"o{i}", weight=1024) for i in range(4)])
    (doc,) = world.store.ledgers.documents()
    for key in ("saved", "counting", "claimCounts"):
        doc.pop(key)  # as an older version writes it
    world.store.ledgers.partition(RECIPIENT)[RECIPIENT] = doc
    depths = await world.worker().depths()
    assert depths.queried == 1 and dict(depths.by_actor[RECIPIENT]) == {"timeseries": 4}
    assert (await world.worker().depths(max_queried=0)).not_measured == (RECIPIENT,)
