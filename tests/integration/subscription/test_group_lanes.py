"""No group waits for another's slow delivery, on the real broker: a shard with a concurrent
endpoint goes on reading and delivering other groups while one group's call hangs, keeps that
group's later messages behind it, and commits its partition only up to the hanging record.

Before, a shard delivered one poll at a time: the messages of a poll read after the hanging one
waited for it (this test timed out on "the other groups delivered")."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.kafka.admin import committed_offsets
from app.kafka.broker import broker_for
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import EndpointSpec
from app.subscription.records import SubscriptionMessage
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.inprocess import running_shards, wait_until

pytestmark = pytest.mark.integration
OTHERS = [f"g{i}" for i in range(10)]


async def test_a_hanging_group_holds_only_itself(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic, name = f"lanes-{unique}", f"lanes-sub-{unique}"
    metadata.create(topic, 1)  # every group in one partition: the commit must stop at the hang
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    try:  # an HTTP subscription (groups side by side), its endpoint replaced by one in-process
        sub = ops.create(
            registry, metadata, name, topic, EndpointSpec("http", "http://127.0.0.1:9/unused"), shard_count=1
        )
    finally:
        registry.close()
    storage = metadata.get(topic).storage_topics[0].name
    release = asyncio.Event()
    delivered: dict[str, list[int]] = defaultdict(list)

    async def endpoint(m: SubscriptionMessage) -> None:
        seq = int(m.payload.decode().split(":")[1])
        if m.group_id == "slow" and seq == 0:
            await release.wait()
        delivered[m.group_id].append(seq)

    def committed() -> int:
        return committed_offsets(stack.bootstrap, sub.consumer_group, [(storage, 0)])[0]

    async with running_shards(stack, sub, metadata, endpoint):
        try:
            with CompositeProducer(stack, topic, store=metadata) as producer:
                producer.produce("slow", "slow:0")
                producer.produce("a", "a:0")
            await wait_until(lambda: delivered["a"] == [0], 30, "the first poll delivered around the hang")
            with CompositeProducer(stack, topic, store=metadata) as producer:  # a later poll
                producer.produce("slow", "slow:1")
                for seq in range(1, 21):
                    for g in OTHERS:
                        producer.produce(g, f"{g}:{seq}")
            await wait_until(
                lambda: all(delivered[g] == list(range(1, 21)) for g in OTHERS),
                30,
                "the other groups delivered",
            )
            assert delivered["slow"] == [], "slow's later message waits behind its hanging one"
            assert await asyncio.to_thread(committed) == 0, "nothing committed past the hanging record"
            release.set()
            await wait_until(lambda: delivered["slow"] == [0, 1], 30, "slow delivered in order once released")
            total = 2 + 1 + 20 * len(OTHERS)
            await wait_until(
                lambda: committed() == total, 30, f"the partition committed to its end ({total})"
            )
        finally:
            release.set()  # a failed check must not leave the shard hanging at its stop
