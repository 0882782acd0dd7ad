"""A shard restarted while the produce pointer is on a storage topic where its groups change shards
stays at the end of the topic it read, as the running shard does, and holds the states of the
groups it owns in that topic. Before, the restart skipped the gate (the shard went on into the new
topic, where another shard owns some of its groups: their order across shards is lost) and the
states were loaded for the groups of the produce pointer's topic, not the one read."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable

from app.composite.model import StorageTopic
from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.settings import Settings
from app.subscription import ops
from app.subscription.memory import MemoryStates
from app.subscription.model import EndpointSpec
from app.subscription.registry import SubscriptionRegistry
from app.subscription.runner import ShardRunner
from tests.integration.subscription.inprocess import Recorder, wait_until

GROUPS = [f"g{i}" for i in range(8)]


def produce(stack: Settings, metadata: MetadataStore, topic: str, seqs: range) -> None:
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in seqs:
            g = GROUPS[seq % len(GROUPS)]
            producer.produce(g, f"{g}:{seq}")


async def test_a_restart_keeps_the_gate_and_the_states_of_the_topic_read(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic = f"gate-{unique}"
    metadata.create(topic, 4)
    produce(stack, metadata, topic, range(40))
    registry = SubscriptionRegistry(stack.bootstrap, f"__subs-{unique}")
    try:
        sub = ops.create(
            registry, metadata, f"gate-{unique}", topic, EndpointSpec("callable", "rec"), shard_count=2
        )
    finally:
        registry.close()
    endpoint = Recorder()
    loaded: dict[int, list[str]] = defaultdict(list)

    def runners() -> list[ShardRunner]:
        made = []
        for shard in range(sub.shard_count):

            async def load(storage: StorageTopic, shard: int = shard) -> MemoryStates:
                loaded[shard].append(storage.name)
                return MemoryStates()

            made.append(ShardRunner(stack, sub, shard, MemoryStates(), endpoint, metadata, load_states=load))
        return made

    async def run(shards: list[ShardRunner], until: Callable[[], bool], what: str) -> None:
        tasks = [asyncio.create_task(r.run()) for r in shards]
        try:
            await wait_until(until, 60, what)
        finally:
            for r in shards:
                r.stop()
            await asyncio.gather(*tasks)

    assert sub.shard_count == 2
    await run(runners(), lambda: endpoint.count() >= 40, "the first storage topic delivered")
    metadata.add_storage_topic(topic, 6)  # 4 -> 6 partitions: groups change shards between the two
    metadata.switch_produce(topic)
    produce(stack, metadata, topic, range(40, 60))

    restarted = runners()
    await run(
        restarted, lambda: all(r.stats.mq_held_at == 0 for r in restarted), "both shards held at MQ storage 0"
    )
    assert sorted(s for v in endpoint.delivered.values() for s in v) == list(range(40)), (
        "nothing read past the gate"
    )
    first = metadata.get(topic).storage_topics[0].name
    assert dict(loaded) == {0: [first], 1: [first]}, "states of the groups each shard owns in the topic read"
