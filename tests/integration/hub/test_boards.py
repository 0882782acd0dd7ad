"""The peek after a dequeue starts from what the last peek learned (app/hub/views.py): it forms
the bundles a full peek forms, and drops the board whenever the board cannot tell."""

from __future__ import annotations

import random

from app.cosmos import CosmosStore
from app.dataavailable import DataAvailable
from app.hub import MessageHub
from app.settings import Settings
from tests.integration.hub.conftest import DRAWER_CAPACITY, events, ids, open_hub

MB = 1024 * 1024
HEAVY = 20 * MB  # two per bundle


def mixed(actor: str, n: int, seed: int) -> list[DataAvailable]:
    """Interleaved domains and message types, some events that travel alone, weights that close
    bundles: every way a bundle ends."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        domain = rng.choice(("timeseries", "aggregations", "masterdata"))
        [event] = events(
            actor,
            1,
            domain=domain,
            message_type=rng.choice(("a", "b")),
            weight=rng.choice((1024, 1024, 15 * MB)),
            bundleable=rng.random() < 0.85,
        )
        out.append(event)
    return out


async def drain(peeker: MessageHub, dequeuer: MessageHub, actor: str) -> list[list[str]]:
    bundles = []
    while (bundle := await peeker.peek(actor)) is not None:
        bundles.append(ids(bundle.events))
        await dequeuer.dequeue(actor, bundle.bundle_id)
    return bundles


async def test_bundles_from_the_board_are_the_bundles_of_full_peeks(
    stack: Settings, cosmos: CosmosStore, hub: MessageHub, unique: str
) -> None:
    actor = f"board-{unique}"
    saved = mixed(actor, 120, seed=11)
    reference = await open_hub(stack.model_copy(update={"hub_container_prefix": f"ref{unique}"}), cosmos)
    elsewhere = await open_hub(stack.model_copy(update={"hub_container_prefix": f"ref{unique}"}), cosmos)
    try:
        for start in range(0, len(saved), 25):  # several saves: several drawers per cabinet
            await hub.save(saved[start : start + 25])
            await reference.save(saved[start : start + 25])
        before = hub.requests
        with_boards = await drain(hub, hub, actor)
        boards_requests = hub.requests - before
        before = reference.requests + elsewhere.requests
        # Dequeued through another instance, the reference's peeks never start from a board.
        full = await drain(reference, elsewhere, actor)
        full_requests = reference.requests + elsewhere.requests - before
    finally:
        await reference.close()
        await elsewhere.close()
    assert with_boards == full
    assert sorted(i for bundle in with_boards for i in bundle) == sorted(ids(saved))
    assert len(with_boards) > 20
    assert boards_requests < full_requests * 0.8, (boards_requests, full_requests)


async def test_a_bundle_that_may_go_on_in_a_drawer_opened_since_is_formed_by_a_full_peek(
    hub: MessageHub, unique: str
) -> None:
    actor = f"opened-{unique}"
    first = events(actor, 3, weight=HEAVY) + events(actor, DRAWER_CAPACITY - 3)
    await hub.save(first)  # fills the first drawer
    bundle = await hub.peek(actor)
    assert bundle is not None and ids(bundle.events) == ids(first[:2])
    await hub.dequeue(actor, bundle.bundle_id)
    later = events(actor, 2)
    await hub.save(later)  # into a second drawer, which the board does not know
    bundle = await hub.peek(actor)
    assert bundle is not None and ids(bundle.events) == ids(first[2:] + later)


async def test_a_dequeue_through_another_worker_sets_the_board_aside(
    stack: Settings, cosmos: CosmosStore, hub: MessageHub, unique: str
) -> None:
    actor = f"other-{unique}"
    saved = events(actor, 6, weight=HEAVY)
    await hub.save(saved)
    other = await open_hub(stack, cosmos)
    try:
        seen = []
        for peeker in (hub, other, hub):
            bundle = await peeker.peek(actor)
            assert bundle is not None
            seen.append(ids(bundle.events))
            await peeker.dequeue(actor, bundle.bundle_id)
        assert await hub.peek(actor) is None
    finally:
        await other.close()
    assert seen == [ids(saved[0:2]), ids(saved[2:4]), ids(saved[4:6])]
