"""A worker killed with SIGKILL at a subscription write, with its real group-state table: the
restarted worker reads the states back from the changelog, adopts the RQ copies they lack, and
the subscriber (an HTTP endpoint) still gets every message of each group in order; the blocked
group's messages are each in DLQ once."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.settings import Settings
from tests.integration.subscription.conftest import (
    Endpoint,
    Workers,
    dead_letter_seqs,
    started_http_subscription,
)
from tests.integration.subscription.inprocess import last_delivery_order
from tests.support.soak import first_in_every_suite

pytestmark = pytest.mark.integration

GROUPS, PER_GROUP = 12, 8


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "crash_at",
    first_in_every_suite(
        [
            "subscription.rq.confirmed:3:kill",  # a copy in RQ that the changelog does not record
            "subscription.state.write:4:kill",  # the process dies as a group state is written
            "subscription.state.forget:1:kill",  # as a recovered group's state leaves the table
        ],
        1,
    ),
)
async def test_a_worker_killed_at_a_subscription_write_keeps_every_group_in_order(
    stack: Settings, metadata: MetadataStore, workers: Workers, endpoint: Endpoint, unique: str, crash_at: str
) -> None:
    topic = f"subkill-{unique}"
    groups = [f"g{i}" for i in range(GROUPS)]
    endpoint.transient = set(groups[:4])  # the first two attempts of each of their messages fail
    blocked_seq = 5 * GROUPS + 7  # g7's sixth message fails for good: g7 is blocked from there
    endpoint.broken = {str(blocked_seq)}
    sub, registry = started_http_subscription(stack, metadata, workers, endpoint, topic, 2.0)
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in range(GROUPS * PER_GROUP):
            producer.produce(f"g{seq % GROUPS}", f"g{seq % GROUPS}:{seq}")
    port = 18000 + int(unique[:4], 16) % 900
    crashed = workers.start(port, HUBSTREAM_CRASH_AT=crash_at)
    assert await asyncio.to_thread(crashed.wait, 120) == -9, "the crash point was not reached"
    workers.procs.pop(port)
    workers.start(port)

    expected = {g: [s for s in range(GROUPS * PER_GROUP) if s % GROUPS == int(g[1:])] for g in groups}
    expected["g7"] = [s for s in expected["g7"] if s < blocked_seq]
    dead: list[int] = []
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        if all(set(expected[g]) <= set(endpoint.delivered[g]) for g in groups):
            dead = await asyncio.to_thread(dead_letter_seqs, metadata, registry, sub.name)
            if len(dead) >= PER_GROUP - 5:
                break
        await asyncio.sleep(0.25)  # the next look at the endpoint and the DLQ
    for g in groups:
        assert last_delivery_order(endpoint.delivered[g]) == expected[g], f"{g}: {endpoint.delivered[g]}"
    assert dead == [s for s in range(GROUPS * PER_GROUP) if s % GROUPS == 7 and s >= blocked_seq]
