"""Operator commands that write definitions or offsets, crashed at their write (the point raises,
as a refused or lost write would): the command fails loudly, nothing half-done is visible, and
running the same command again gives what one clean run gives.

- `composite.metadata.write`: a composite topic's definition (its storage topics are created first).
- `subscription.registry.write`: a subscription's definition; in reset-offset, the epoch bump.
- `subscription.ops.commit`: reset-offset's commit of the consumer group's offsets.

reset-offset commits the offsets, then bumps the epoch (the old pass's "handled" marks no longer
apply): cut before the commit nothing moved; cut between the two, the re-run commits the same
offsets and bumps the epoch. Either way the rewound messages are delivered again, in order.
"""

from __future__ import annotations

import pytest

from app import crashpoints
from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.errors import NotFound
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import EndpointSpec
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.inprocess import Recorder, running_shards, wait_until

pytestmark = [pytest.mark.integration]

MESSAGES = 60


def test_composite_create_cut_at_its_metadata_write(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    name = f"adm-{unique}"
    with crashpoints.armed("composite.metadata.write"), pytest.raises(crashpoints.InjectedFault):
        metadata.create(name, 3)
    assert name not in metadata.refresh(), "no definition after a failed create"
    topic = metadata.create(name, 3)
    assert metadata.refresh()[name] == topic
    assert [s.partitions for s in topic.storage_topics] == [3]


def test_subscription_create_cut_at_its_registry_write(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    metadata.create(f"adm-{unique}", 2)
    registry = SubscriptionRegistry(
        stack.bootstrap, f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    try:
        name = f"adm-sub-{unique}"
        with crashpoints.armed("subscription.registry.write"), pytest.raises(crashpoints.InjectedFault):
            ops.create(registry, metadata, name, f"adm-{unique}", EndpointSpec("callable", "rec"))
        with pytest.raises(NotFound):
            registry.get(name)
        sub = ops.create(registry, metadata, name, f"adm-{unique}", EndpointSpec("callable", "rec"))
        assert registry.get(name) == sub
    finally:
        registry.close()


@pytest.mark.parametrize("point", ["subscription.registry.write", "subscription.ops.commit"])
async def test_reset_offset_cut_at_its_writes_then_run_again(
    stack: Settings, metadata: MetadataStore, unique: str, point: str
) -> None:
    topic = f"adm-r-{unique}"
    metadata.create(topic, 1)
    groups = [f"g{i}" for i in range(4)]
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in range(MESSAGES):
            g = groups[seq % len(groups)]
            producer.produce(g, f"{g}:{seq}")
    registry = SubscriptionRegistry(
        stack.bootstrap, f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    try:
        sub = ops.create(registry, metadata, f"adm-r-{unique}", topic, EndpointSpec("callable", "rec"))
        first = Recorder()
        async with running_shards(stack, sub, metadata, endpoint=first):
            await wait_until(lambda: first.count() >= MESSAGES, 30, "first pass")

        with crashpoints.armed(point), pytest.raises(crashpoints.InjectedFault):
            ops.reset_offset(registry, metadata, sub.name, "mq", storage_idx=0, offset=20)
        ops.reset_offset(registry, metadata, sub.name, "mq", storage_idx=0, offset=20)

        rewound = Recorder()
        async with running_shards(stack, registry.get(sub.name), metadata, endpoint=rewound):
            await wait_until(lambda: rewound.count() >= MESSAGES - 20, 30, "rewound pass")
        assert sorted(s for v in rewound.delivered.values() for s in v) == list(range(20, MESSAGES))
        for g, seqs in rewound.delivered.items():
            assert seqs == sorted(seqs), g
    finally:
        registry.close()
