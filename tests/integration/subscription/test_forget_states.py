"""Groups that failed once and then went through keep no state, in a worker with its real
GroupState table: once the shard's commits pass their marks, their states leave the table's
changelog, while the dead-lettered group keeps its own; a restarted worker (which loads the
tombstones) still delivers every group's next messages in order, and forgets again."""

from __future__ import annotations

import asyncio

import pytest

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.settings import Settings
from app.subscription.statelog import changelog_topic, scan_states
from tests.integration.subscription.conftest import (
    Endpoint,
    Workers,
    dead_letter_seqs,
    started_http_subscription,
)
from tests.integration.subscription.inprocess import last_delivery_order
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.integration

GROUPS, PER_ROUND = 12, 6
BLOCKED = "g7"


def _produce(stack: Settings, metadata: MetadataStore, topic: str, seqs: range) -> None:
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in seqs:
            producer.produce(f"g{seq % GROUPS}", f"g{seq % GROUPS}:{seq}")


@pytest.mark.timeout(300)
async def test_recovered_groups_forget_their_states_and_keep_order_after(
    stack: Settings, metadata: MetadataStore, workers: Workers, endpoint: Endpoint, unique: str
) -> None:
    topic = f"subforget-{unique}"
    groups = [f"g{i}" for i in range(GROUPS)]
    endpoint.transient = set(groups[:4])  # the first two attempts of each of their messages fail
    blocked_seq = 3 * GROUPS + 7  # g7's fourth message fails for good: g7 is blocked from there
    endpoint.broken = {str(blocked_seq)}
    sub, registry = started_http_subscription(stack, metadata, workers, endpoint, topic, 0.5)

    def with_state() -> set[str]:
        changelog = changelog_topic(workers.app_id)
        slots = stack.subscription_shard_slots
        return set(scan_states(broker_for(stack), changelog, slots, sub.state_scope))

    def expected(upto: int) -> dict[str, list[int]]:
        seqs = {g: [s for s in range(upto) if s % GROUPS == int(g[1:])] for g in groups}
        seqs[BLOCKED] = [s for s in seqs[BLOCKED] if s < blocked_seq]
        return seqs

    async def delivered(upto: int) -> None:
        want = expected(upto)
        await async_wait_until(
            lambda: all(set(want[g]) <= set(endpoint.delivered[g]) for g in groups),
            150,
            f"every group's messages below {upto} at the endpoint",
        )
        for g in groups:
            assert last_delivery_order(endpoint.delivered[g]) == want[g], f"{g}: {endpoint.delivered[g]}"

    port = 18000 + int(unique[:4], 16) % 900
    first = range(GROUPS * PER_ROUND)
    _produce(stack, metadata, topic, first)
    workers.start(port)
    await delivered(first.stop)
    await async_wait_until(
        lambda: with_state() == {BLOCKED},
        60,
        "only the dead-lettered group to keep a state in the changelog",
        poll_s=0.5,
        retry_on=(Exception,),
    )

    workers.stop_all()  # the next worker loads the tombstones, not the states
    second = range(first.stop, 2 * first.stop)
    _produce(stack, metadata, topic, second)
    workers.start(port)
    await delivered(second.stop)
    await async_wait_until(
        lambda: with_state() == {BLOCKED},
        60,
        "the recovered groups forgotten again after their second round",
        poll_s=0.5,
        retry_on=(Exception,),
    )
    want_dead = [s for s in range(second.stop) if s % GROUPS == 7 and s >= blocked_seq]

    async def all_dead() -> bool:
        return await asyncio.to_thread(dead_letter_seqs, metadata, registry, sub.name) == want_dead

    await async_wait_until(all_dead, 60, "the blocked group's messages in DLQ, each once")
