"""A shard delivers every message of its partitions even when its Kafka client starts a partition
past where the group's committed offset (none: the beginning) says. The embedded broker can answer
"the beginning" with a later offset while producers write (app.kafka.sequence); this test moves the
client behind the shard's back, as that answer did. Before the guard, the first JUMP messages of the
partition were never delivered."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from app.composite.store import MetadataStore
from app.settings import Settings
from app.subscription.memory import MemoryStates
from app.subscription.runner import ShardRunner
from tests.integration.subscription.inprocess import (
    GROUPS,
    Recorder,
    callable_subscription,
    produce,
    wait_until,
)

MESSAGES = 80
JUMP = 9  # where the client starts partition 0


class JumpingClientRunner(ShardRunner):
    jumped = False

    async def _assign(self) -> None:
        await super()._assign()
        if not self.jumped:
            self.jumped = True
            assert self._consumer is not None
            storage = self.mq.partitions(self._topic(self.mq))[0].topic
            self._consumer.seek(TopicPartition(storage, 0), JUMP)


async def test_messages_the_client_skipped_are_delivered_in_group_order(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic = f"skip-{unique}"
    metadata.create(topic, 2)
    produce(stack, metadata, topic, range(MESSAGES))
    storage = metadata.get(topic).storage_topics[0]
    sub = callable_subscription(stack, metadata, unique, f"skip-{unique}", topic, shard_count=1)
    endpoint = Recorder()
    runner = JumpingClientRunner(stack, sub, 0, MemoryStates(), endpoint, metadata)
    task = asyncio.create_task(runner.run())
    try:
        await wait_until(lambda: endpoint.count() >= MESSAGES, 60, f"{MESSAGES} messages delivered")
    finally:
        runner.stop()
        await asyncio.gather(task)

    assert runner.jumped, "the client moved partition 0 past where the shard placed it"
    assert storage.partitions == 2
    delivered = {seq for seqs in endpoint.delivered.values() for seq in seqs}
    assert delivered == set(range(MESSAGES)), f"never delivered: {sorted(set(range(MESSAGES)) - delivered)}"
    for group, seqs in endpoint.delivered.items():
        expected = [seq for seq in range(MESSAGES) if GROUPS[seq % len(GROUPS)] == group]
        assert seqs == expected, f"{group}: delivered {seqs}, produced {expected}"
