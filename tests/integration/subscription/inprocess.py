"""Shard runners in the test process (real broker, RQ/DLQ topics), for endpoints that live in-process.

`MemoryStates` implements the `ShardStates` port in memory: the GroupState table is covered by the
worker tests; here the object under test is delivery.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.settings import Settings
from app.subscription import ops
from app.subscription.endpoints import BatchSink, Endpoint
from app.subscription.memory import MemoryStates
from app.subscription.model import EndpointSpec, Subscription
from app.subscription.records import SubscriptionMessage
from app.subscription.registry import SubscriptionRegistry
from app.subscription.runner import ShardRunner
from tests.support.waiting import async_wait_until

GROUPS = [f"g{i}" for i in range(8)]


def produce(stack: Settings, metadata: MetadataStore, topic: str, seqs: range) -> None:
    """Messages "group:seq" for each seq, the groups taken in turn from GROUPS."""
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in seqs:
            g = GROUPS[seq % len(GROUPS)]
            producer.produce(g, f"{g}:{seq}")


def callable_subscription(
    stack: Settings, metadata: MetadataStore, unique: str, name: str, topic: str, shard_count: int
) -> Subscription:
    """A subscription of `topic` with an in-process endpoint, in a registry of the test's own."""
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    try:
        return ops.create(
            registry, metadata, name, topic, EndpointSpec("callable", "rec"), shard_count=shard_count
        )
    finally:
        registry.close()


class Recorder:
    """A callable endpoint keeping each group's delivered sequence numbers (payload "group:seq")."""

    def __init__(self) -> None:
        self.delivered: dict[str, list[int]] = defaultdict(list)

    def count(self) -> int:
        return sum(map(len, self.delivered.values()))

    async def __call__(self, m: SubscriptionMessage) -> None:
        self.delivered[m.group_id].append(int(m.payload.decode().split(":")[1]))


def last_delivery_order(delivered: list[int]) -> list[int]:
    """The sequence numbers by the place of each one's last delivery: redeliveries allowed, the
    group's order is what its consumer ends up with."""
    last = {seq: at for at, seq in enumerate(delivered)}
    return sorted(last, key=last.__getitem__)


@asynccontextmanager
async def running_shards(
    settings: Settings,
    sub: Subscription,
    metadata: MetadataStore,
    endpoint: Endpoint | None = None,
    batch_sink: BatchSink | None = None,
    states: MemoryStates | None = None,
) -> AsyncIterator[list[ShardRunner]]:
    """Every shard of `sub`; `states` shared by all shards stands for the re-sharded state table."""
    runners = [
        ShardRunner(settings, sub, shard, states or MemoryStates(), endpoint, metadata, batch_sink)
        for shard in range(sub.shard_count)
    ]
    tasks = [asyncio.create_task(r.run()) for r in runners]
    try:
        yield runners
    finally:
        for r in runners:
            r.stop()
        await asyncio.gather(*tasks)


async def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    await async_wait_until(check, timeout_s, what, poll_s=0.2)
