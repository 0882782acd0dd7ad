"""reset-offset on the real broker: MQ rewind to (storage topic, offset) and fast-forward to a
timestamp redeliver exactly the messages from there on, in order; RQ/DLQ refuse a rewind; a
running subscription refuses any reset.
"""

from __future__ import annotations

import time

import pytest

from app.composite.producer import CompositeProducer
from app.composite.routing import group_hash
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.settings import Settings
from app.subscription import ops
from app.subscription.errors import InvalidSubscription
from app.subscription.model import EndpointSpec, Status
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.inprocess import Recorder, running_shards, wait_until


def mq_lag(registry: SubscriptionRegistry, metadata: MetadataStore, name: str) -> int:
    return sum(shard["mq_lag"] for shard in ops.queue_lag(registry, metadata, name)["shards"])


async def test_mq_rewind_and_timestamp_fast_forward(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic = f"subr-{unique}"
    metadata.create(topic, 2)
    storage = metadata.get(topic).storage_topics[0]
    groups = [f"g{i}" for i in range(6)]
    # seq -> (partition, offset), to know what a reset to an offset must redeliver
    where: dict[int, tuple[int, int]] = {}
    next_offset = [0, 0]

    def produce(seqs: range) -> None:
        with CompositeProducer(stack, topic, store=metadata) as producer:
            for seq in seqs:
                g = groups[seq % len(groups)]
                producer.produce(g, f"{g}:{seq}")
                p = storage.route(group_hash(g))
                where[seq] = (p, next_offset[p])
                next_offset[p] += 1

    produce(range(120))
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    sub = ops.create(registry, metadata, f"subr-{unique}", topic, EndpointSpec("callable", "rec"))
    first = Recorder()
    async with running_shards(stack, sub, metadata, endpoint=first):
        await wait_until(lambda: first.count() >= 120, 30, "first pass")

    ops.reset_offset(registry, metadata, sub.name, "mq", storage_idx=0, offset=10)
    sub = registry.get(sub.name)
    assert sub.epoch == 1  # a rewind bumps the epoch: "handled" marks of the old pass no longer apply
    expected = {s for s, (_p, off) in where.items() if off >= 10}
    rewound = Recorder()
    async with running_shards(stack, sub, metadata, endpoint=rewound):
        await wait_until(lambda: rewound.count() >= len(expected), 30, "rewound pass")
    assert {s for v in rewound.delivered.values() for s in v} == expected
    for g, seqs in rewound.delivered.items():
        assert seqs == sorted(seqs), g

    # Records 0-119 were stamped before both passes above ran (seconds ago); 120-149 are stamped
    # at their produce(), after the cut was read from the same clock: at or after it.
    cut_ms = int(time.time() * 1000)
    produce(range(120, 150))
    ops.reset_offset(registry, metadata, sub.name, "mq", timestamp_ms=cut_ms)
    sub = registry.get(sub.name)
    later = Recorder()
    async with running_shards(stack, sub, metadata, endpoint=later):
        await wait_until(lambda: later.count() >= 30, 30, "pass after the timestamp")
        # Every MQ record handled and committed: anything older the reset let through would have
        # been delivered by now.
        await wait_until(lambda: mq_lag(registry, metadata, sub.name) == 0, 30, "the MQ committed to its end")
    assert sorted(s for v in later.delivered.values() for s in v) == list(range(120, 150))


async def test_rq_dlq_refuse_rewind_and_running_refuses_reset(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic = f"subq-{unique}"
    metadata.create(topic, 2)
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    sub = ops.create(registry, metadata, f"subq-{unique}", topic, EndpointSpec("callable", "rec"))
    rq = metadata.get(sub.rq_topic).storage_topics[0]
    with CompositeProducer(stack, sub.rq_topic, store=metadata) as producer:
        for i in range(10):
            producer.produce(f"g{i}", b"x")
    # fast-forward RQ to its end: allowed
    done = ops.reset_offset(registry, metadata, sub.name, "rq", storage_idx=0, offset=10_000)
    assert sum(done["offsets"].values()) == 10
    # back to 0: refused, RQ/DLQ only move forward
    with pytest.raises(InvalidSubscription, match="only be fast-forwarded"):
        ops.reset_offset(registry, metadata, sub.name, "rq", storage_idx=0, offset=0)
    assert f"{rq.name}[0]" in done["offsets"]
    ops.set_status(registry, sub.name, Status.RUNNING)
    with pytest.raises(InvalidSubscription, match="stop subscription"):
        ops.reset_offset(registry, metadata, sub.name, "mq", storage_idx=0, offset=0)
    with pytest.raises(InvalidSubscription, match="either an offset"):
        ops.set_status(registry, sub.name, Status.STOPPED)
        ops.reset_offset(registry, metadata, sub.name, "dlq")
