"""ChangeShardCount after a main-topic partition change (seed 002): MQ T0 has 4 partitions and
2 shards; T1 gets 6 partitions (K=1, groups move between shards), so shards stop at T0's end;
change-shards 3 adds 6-partition RQ/DLQ storage topics, the old RQ lag is fed into them by the
new shards, and every group is delivered completely, in produce order.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.settings import Settings
from app.subscription import ops
from app.subscription.errors import EndpointUnavailable
from app.subscription.model import EndpointSpec, RetryPolicy
from app.subscription.records import SubscriptionMessage
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.inprocess import MemoryStates, running_shards, wait_until


class FirstAttemptFails:
    """Transient groups fail the first attempt of their first messages (seq < 90)."""

    def __init__(self, transient: set[str]) -> None:
        self.transient = transient
        self.delivered: dict[str, list[int]] = defaultdict(list)

    def count(self) -> int:
        return sum(map(len, self.delivered.values()))

    async def __call__(self, m: SubscriptionMessage) -> None:
        seq = int(m.payload.decode().split(":")[1])
        if m.group_id in self.transient and m.attempt == 1 and seq < 90:
            raise EndpointUnavailable("busy")
        self.delivered[m.group_id].append(seq)


async def test_partition_change_then_change_shards_feeds_old_rq(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic = f"subc-{unique}"
    metadata.create(topic, 4)
    groups = [f"g{i}" for i in range(30)]
    transient = set(groups[:6])
    produced: dict[str, list[int]] = {g: [] for g in groups}

    def produce(seqs: range) -> None:
        with CompositeProducer(stack, topic, store=MetadataStore(stack.bootstrap, stack.metadata_topic)) as p:
            for seq in seqs:
                g = groups[seq % len(groups)]
                p.produce(g, f"{g}:{seq}")
                produced[g].append(seq)

    produce(range(300))
    registry = SubscriptionRegistry(stack.bootstrap, f"__subs-{unique}")
    sub = ops.create(
        registry,
        metadata,
        f"subc-{unique}",
        topic,
        EndpointSpec("callable", "flaky"),
        shard_count=2,
        retry=RetryPolicy(max_attempts=5, min_backoff_s=3.0, max_backoff_s=3.0),
    )
    settings = stack.model_copy(update={"metadata_refresh_s": 0.5})
    sink = FirstAttemptFails(transient)
    states = MemoryStates()
    clean = sum(len(produced[g]) for g in groups if g not in transient)
    async with running_shards(settings, sub, metadata, endpoint=sink, states=states) as runners:
        await wait_until(lambda: sink.count() >= clean, 30, "the clean groups")
        metadata.add_storage_topic(topic, 6)
        metadata.switch_produce(topic)
        produce(range(300, 450))
        await asyncio.sleep(2 * settings.metadata_refresh_s + 1.5)  # past the switch grace period
        assert all(r.mq.idx == 0 for r in runners), "a shard moved into an incompatible storage topic"
    # the transient groups' retries are still waiting in the 4-partition RQ (3 s backoff)
    assert sink.count() < 300
    changed = ops.change_shards(registry, metadata, sub.name, 3, stop_wait_s=0)
    assert changed.shard_count == 3
    rq = metadata.get(sub.rq_topic)
    assert [s.partitions for s in rq.storage_topics] == [4, 6] and rq.produce_pointer == 1
    async with running_shards(settings, changed, metadata, endpoint=sink, states=states) as runners:
        await wait_until(lambda: sink.count() >= 450, 60, "every message")
        fed = sum(r.stats.fed for r in runners)
    assert fed > 0
    for g in groups:
        assert sink.delivered[g] == produced[g], g
