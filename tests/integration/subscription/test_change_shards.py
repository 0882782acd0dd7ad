"""ChangeShardCount after a main-topic partition change (the Varadhi design): MQ T0 has 4 partitions and
2 shards; T1 gets 6 partitions (K=1, groups move between shards), so shards stop at T0's end;
change-shards 3 adds 6-partition RQ/DLQ storage topics, the old RQ lag is fed into them by the
new shards, and every group is delivered completely, in produce order. Cut while feeding
(`subscription.rq.fed`, the shard's step raises as a refused produce would) and restarted, the
shard feeds again from the old topic's committed offsets: every message delivered, each group in
produce order at each message's last delivery. The held groups, recovered through fed copies,
forget their states once the shards committed past every fed copy.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pytest

from app import crashpoints
from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.ordered.policy import RetryPolicy
from app.settings import Settings
from app.subscription import ops
from app.subscription.errors import EndpointUnavailable
from app.subscription.memory import MemoryStates
from app.subscription.model import EndpointSpec, Subscription
from app.subscription.records import SubscriptionMessage
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.inprocess import (
    last_delivery_order,
    running_shards,
    wait_until,
)


class HeldGroups:
    """Transient groups fail their first messages (seq < 90) until `hold` is cleared: their
    retries wait in the RQ however long the first session takes, and each failed retry writes
    the group's head again behind its sidelined followers."""

    def __init__(self, transient: set[str]) -> None:
        self.transient = transient
        self.hold = True
        self.failures: dict[str, int] = defaultdict(int)
        self.delivered: dict[str, list[int]] = defaultdict(list)

    def count(self) -> int:
        return sum(map(len, self.delivered.values()))

    async def __call__(self, m: SubscriptionMessage) -> None:
        seq = int(m.payload.decode().split(":")[1])
        if self.hold and m.group_id in self.transient and seq < 90:
            self.failures[m.group_id] += 1
            raise EndpointUnavailable("busy")
        self.delivered[m.group_id].append(seq)


@dataclass
class Resharded:
    settings: Settings
    sub: Subscription
    sink: HeldGroups
    states: MemoryStates
    produced: dict[str, list[int]]


async def reshard_with_rq_lag(stack: Settings, metadata: MetadataStore, unique: str) -> Resharded:
    """Two shards stop at T0's end (T1 moves groups), the transient groups' retries wait in the
    4-partition RQ until change-shards 3 has added 6-partition RQ/DLQ storage topics, each group's
    head written there again and again behind its followers."""
    topic = f"subc-{unique}"
    metadata.create(topic, 4)
    groups = [f"g{i}" for i in range(30)]
    transient = set(groups[:6])
    produced: dict[str, list[int]] = {g: [] for g in groups}

    def produce(seqs: range) -> None:
        with CompositeProducer(
            stack,
            topic,
            store=MetadataStore.of(stack),
        ) as p:
            for seq in seqs:
                g = groups[seq % len(groups)]
                p.produce(g, f"{g}:{seq}")
                produced[g].append(seq)

    produce(range(300))
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    sub = ops.create(
        registry,
        metadata,
        f"subc-{unique}",
        topic,
        EndpointSpec("callable", "flaky"),
        shard_count=2,
        # a held group retries every 3 s (a copy fed before it is due waits in the new RQ);
        # 100 attempts outlast any first session
        retry=RetryPolicy(max_attempts=100, min_backoff_s=3.0, max_backoff_s=3.0),
    )
    # no feeder is replaced while it runs here: the fed copies' end is dated as soon as asked
    settings = stack.model_copy(update={"metadata_refresh_s": 0.5, "subscription_fed_settle_s": 0.0})
    sink = HeldGroups(transient)
    states = MemoryStates()
    clean = sum(len(produced[g]) for g in groups if g not in transient)
    async with running_shards(settings, sub, metadata, endpoint=sink, states=states) as runners:
        await wait_until(lambda: sink.count() >= clean, 30, "the clean groups")
        metadata.add_storage_topic(topic, 6)
        metadata.switch_produce(topic)
        produce(range(300, 450))
        # the gate comes before the switch grace period: held means it will never move on
        await wait_until(lambda: all(r.stats.mq_held_at == 0 for r in runners), 30, "both shards held at T0")
        # an RQ of superseded copies: every head failed at its first attempt and three retries
        await wait_until(lambda: all(sink.failures[g] >= 4 for g in transient), 60, "retried heads")
    assert sink.count() == clean  # the transient groups' messages all wait in the 4-partition RQ
    changed = ops.change_shards(registry, metadata, sub.name, 3, stop_wait_s=0)
    sink.hold = False  # from here on, the retries fed to the new RQ are delivered
    registry.close()
    assert changed.shard_count == 3
    rq = metadata.get(sub.rq_topic)
    assert [s.partitions for s in rq.storage_topics] == [4, 6] and rq.produce_pointer == 1
    return Resharded(settings, changed, sink, states, produced)


def forgotten(r: Resharded) -> bool:
    """Every group recovered, none dead-lettered: no state is left (the held groups' states, whose
    consumed marks are their copies' places in the old RQ storage topic, included)."""
    return all(r.states.get(g) is None for g in r.produced)


async def test_partition_change_then_change_shards_feeds_old_rq(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    r = await reshard_with_rq_lag(stack, metadata, unique)
    async with running_shards(r.settings, r.sub, metadata, endpoint=r.sink, states=r.states) as runners:
        await wait_until(lambda: r.sink.count() >= 450, 60, "every message")
        fed = sum(runner.stats.fed for runner in runners)
        await wait_until(lambda: forgotten(r), 30, "the states of the groups recovered through fed copies")
    assert fed > 0
    for g, seqs in r.produced.items():
        assert r.sink.delivered[g] == seqs, g


async def test_a_shard_cut_while_feeding_feeds_again_after_its_restart(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    r = await reshard_with_rq_lag(stack, metadata, unique)
    with crashpoints.armed("subscription.rq.fed", nth=3) as cut, pytest.raises(crashpoints.InjectedFault):
        async with running_shards(r.settings, r.sub, metadata, endpoint=r.sink, states=r.states):
            await wait_until(lambda: cut.fired, 60, "the cut while feeding")
    async with running_shards(r.settings, r.sub, metadata, endpoint=r.sink, states=r.states):
        await wait_until(
            lambda: all(set(r.sink.delivered[g]) == set(s) for g, s in r.produced.items()),
            60,
            "every message",
        )
        # forgotten only once the copies fed twice were read: else delivered again, out of order
        await wait_until(lambda: forgotten(r), 30, "the states of the groups recovered through fed copies")
    for g, seqs in r.produced.items():
        assert last_delivery_order(r.sink.delivered[g]) == seqs, g
