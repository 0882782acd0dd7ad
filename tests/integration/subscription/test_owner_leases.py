"""Shard leases on the real broker: the owner log's writes as crash points, and a takeover while
the old owner still runs. Two `LaneOwnership`s stand for two worker processes.

- `subscription.owner.claim`: a shard that fails writing its claim delivers nothing; the next
  owner finds no claim to wait for and delivers everything.
- `subscription.owner.release`: a shard that fails releasing its lane leaves its claim standing;
  the next owner waits one lease, then delivers the rest, each group in order.
- A takeover while the old owner runs: the old owner stops at its next act once it read the new
  claim, and the new owner delivers only after the old owner's last delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from app.composite.store import MetadataStore
from app.crashpoints import InjectedFault, armed
from app.kafka.broker import broker_for
from app.ordered.lease import LaneLost
from app.ordered.owner_log import KafkaOwnerLog
from app.ordered.ownership import LaneOwnership
from app.settings import Settings
from app.subscription.memory import MemoryStates
from app.subscription.model import Subscription
from app.subscription.owners import shard_owner_log
from app.subscription.records import SubscriptionMessage
from app.subscription.runner import ShardRunner
from tests.integration.subscription.inprocess import (
    GROUPS,
    Recorder,
    callable_subscription,
    last_delivery_order,
    produce,
    wait_until,
)

pytestmark = pytest.mark.integration

LEASE_S = 2.0


@pytest.fixture
def owner_logs(stack: Settings, unique: str) -> Iterator[list[KafkaOwnerLog]]:
    logs = [
        shard_owner_log(
            broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
        )
        for _ in range(2)
    ]
    yield logs
    for owner_log in logs:
        owner_log.close()


@contextlib.asynccontextmanager
async def confirming(*ownerships: LaneOwnership) -> AsyncIterator[None]:
    """Each ownership's confirm loop, as a worker runs it."""
    tasks = [asyncio.create_task(o.run()) for o in ownerships]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _runner(
    stack: Settings, sub: Subscription, metadata: MetadataStore, endpoint: Recorder, ownership: LaneOwnership
) -> ShardRunner:
    return ShardRunner(stack, sub, 0, MemoryStates(), endpoint, metadata, ownership=ownership)


def _in_order(recorder: Recorder, count: int) -> None:
    delivered = {s for seqs in recorder.delivered.values() for s in seqs}
    assert delivered == set(range(count))
    for g in GROUPS:
        expected = [s for s in range(count) if GROUPS[s % len(GROUPS)] == g]
        assert last_delivery_order(recorder.delivered[g]) == expected


async def test_a_failed_claim_delivers_nothing_and_the_next_owner_need_not_wait(
    stack: Settings, metadata: MetadataStore, unique: str, owner_logs: list[KafkaOwnerLog]
) -> None:
    topic = f"claim-{unique}"
    metadata.create(topic, 2)
    sub = callable_subscription(stack, metadata, unique, topic, topic, 1)
    await asyncio.to_thread(produce, stack, metadata, topic, range(40))
    first = Recorder()
    a = LaneOwnership(owner_logs[0], "a", LEASE_S)
    with armed("subscription.owner.claim"), pytest.raises(InjectedFault):
        await _runner(stack, sub, metadata, first, a).run()
    assert first.count() == 0 and owner_logs[1].read_new() == []

    second = Recorder()
    b = LaneOwnership(owner_logs[1], "b", LEASE_S)
    runner = _runner(stack, sub, metadata, second, b)
    started = time.monotonic()
    async with confirming(b):
        task = asyncio.create_task(runner.run())
        try:
            await wait_until(lambda: second.count() >= 40, 60, "40 deliveries by the next owner")
            assert runner.lease is not None and runner.lease.acts_from - started < LEASE_S  # no wait
        finally:
            runner.stop()
            await task
    _in_order(second, 40)


async def test_a_failed_release_makes_the_next_owner_wait_one_lease(
    stack: Settings, metadata: MetadataStore, unique: str, owner_logs: list[KafkaOwnerLog]
) -> None:
    topic = f"release-{unique}"
    metadata.create(topic, 2)
    sub = callable_subscription(stack, metadata, unique, topic, topic, 1)
    await asyncio.to_thread(produce, stack, metadata, topic, range(40))
    recorder = Recorder()
    a, b = LaneOwnership(owner_logs[0], "a", LEASE_S), LaneOwnership(owner_logs[1], "b", LEASE_S)
    async with confirming(a, b):
        old = _runner(stack, sub, metadata, recorder, a)
        task = asyncio.create_task(old.run())
        await wait_until(lambda: recorder.count() >= 40, 60, "40 deliveries by the first owner")
        with armed("subscription.owner.release"), pytest.raises(InjectedFault):
            old.stop()
            await task
        await asyncio.to_thread(produce, stack, metadata, topic, range(40, 80))
        new = _runner(stack, sub, metadata, recorder, b)
        started = time.monotonic()
        task = asyncio.create_task(new.run())
        try:
            await wait_until(lambda: recorder.count() >= 80, 60, "80 deliveries")
            assert time.monotonic() - started >= LEASE_S  # it waited out the claim never released
        finally:
            new.stop()
            await task
    _in_order(recorder, 80)


class Timed(Recorder):
    """A recorder that also notes when each delivery came."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    async def __call__(self, m: SubscriptionMessage) -> None:
        await super().__call__(m)
        self.at.append(time.monotonic())
        await asyncio.sleep(0.01)  # a slow endpoint: the old owner is mid-work at the takeover


async def test_a_takeover_stops_the_old_owner_before_the_new_one_delivers(
    stack: Settings, metadata: MetadataStore, unique: str, owner_logs: list[KafkaOwnerLog]
) -> None:
    topic = f"takeover-{unique}"
    metadata.create(topic, 2)
    sub = callable_subscription(stack, metadata, unique, topic, topic, 1)
    await asyncio.to_thread(produce, stack, metadata, topic, range(400))
    a, b = LaneOwnership(owner_logs[0], "a", LEASE_S), LaneOwnership(owner_logs[1], "b", LEASE_S)
    both = confirming(a, b)
    await both.__aenter__()
    old_seen, new_seen = Timed(), Timed()
    old = _runner(stack, sub, metadata, old_seen, a)
    old_task = asyncio.create_task(old.run())
    await wait_until(lambda: old_seen.count() >= 20, 60, "the old owner delivering")
    new = _runner(stack, sub, metadata, new_seen, b)
    new_task = asyncio.create_task(new.run())
    try:
        with pytest.raises(LaneLost):
            await asyncio.wait_for(old_task, 30)
        await wait_until(
            lambda: len({s for v in new_seen.delivered.values() for s in v}) >= 1, 60, "the new owner"
        )
        assert max(old_seen.at) < min(new_seen.at), "the old owner delivered after the new one started"
        assert old_seen.count() < 400  # it was stopped mid-way
        seen = {s for r in (old_seen, new_seen) for v in r.delivered.values() for s in v}
        await wait_until(
            lambda: seen | {s for v in new_seen.delivered.values() for s in v} >= set(range(400)),
            90,
            "all 400",
        )
    finally:
        new.stop()
        await new_task
        await both.__aexit__(None, None, None)
