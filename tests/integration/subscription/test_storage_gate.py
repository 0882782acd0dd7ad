"""A shard restarted while the produce pointer is on a storage topic where its groups change shards,
and another shard has not finished the topic before, stays at the end of the topic it read, as the
running shard does, and holds the states of the groups it owns in that topic. Before, the restart
skipped the gate: the shard went on into the new topic and delivered messages of groups the other
shard had not delivered the older messages of (order across the two topics lost), with the states
loaded for the groups of the produce pointer's topic, not the one read."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable

from app.composite.model import StorageTopic
from app.composite.store import MetadataStore
from app.settings import Settings
from app.subscription.memory import MemoryStates
from app.subscription.runner import ShardRunner
from app.subscription.shards import shard_of_group
from tests.integration.subscription.inprocess import (
    GROUPS,
    Recorder,
    callable_subscription,
    produce,
    wait_until,
)


async def test_a_restart_keeps_the_gate_and_the_states_of_the_topic_read(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic = f"gate-{unique}"
    metadata.create(topic, 4)
    produce(stack, metadata, topic, range(40))
    sub = callable_subscription(stack, metadata, unique, f"gate-{unique}", topic, shard_count=2)
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
    first = metadata.get(topic).storage_topics[0]
    mine = [seq for seq in range(40) if shard_of_group(GROUPS[seq % len(GROUPS)], first, 2) == 0]
    assert 0 < len(mine) < 40
    only_shard_0 = runners()[:1]  # shard 1 does not run: its part of the first topic waits
    await run(only_shard_0, lambda: endpoint.count() >= len(mine), "shard 0's part of the first topic")
    metadata.add_storage_topic(topic, 6)  # 4 -> 6 partitions: groups change shards between the two
    metadata.switch_produce(topic)
    produce(stack, metadata, topic, range(40, 60))

    restarted = runners()[:1]
    await run(restarted, lambda: restarted[0].stats.mq_held_at == 0, "shard 0 held at MQ storage 0")
    seen = sorted(s for v in endpoint.delivered.values() for s in v)
    assert seen == mine, "nothing read past the gate"
    assert dict(loaded) == {0: [first.name]}, "the states of the groups shard 0 owns in the topic it reads"
