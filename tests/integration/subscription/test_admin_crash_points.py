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
from app.kafka.broker import broker_for
from app.settings import Settings
from app.subscription import ops
from app.subscription.errors import InternalTopicTaken
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
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
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


def test_a_subscription_is_not_created_over_retry_or_dead_letter_topics_holding_records(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    """A user's own `<name>-dlq` with records (or one kept by `delete --keep-topics`): the new
    subscription took it over, read its records as its own and deleted it with itself."""
    topic, name = f"adm-t-{unique}", f"adm-t-sub-{unique}"
    metadata.create(topic, 2)
    metadata.create(f"{name}-dlq", 2)
    with CompositeProducer(stack, f"{name}-dlq", store=metadata) as producer:
        producer.produce("g", "someone else's record")
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    try:
        with pytest.raises(InternalTopicTaken, match=f"{name}-dlq"):
            ops.create(registry, metadata, name, topic, EndpointSpec("callable", "rec"))
        with pytest.raises(NotFound):
            registry.get(name)
        assert f"{name}-dlq" in metadata.refresh()
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
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
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


def _storage_topics(metadata: MetadataStore) -> set[str]:
    return set(metadata.admin.topics())


@pytest.mark.parametrize("point", ["composite.delete.topics", "composite.metadata.write"])
def test_composite_delete_cut_then_run_again(
    stack: Settings, metadata: MetadataStore, unique: str, point: str
) -> None:
    """Cut before its storage topics go or before its definition does, the composite topic is still
    defined and deleting it again finishes the job; one created again under the name holds none of
    the old records (the definition used to go first, leaving storage topics a new one took over)."""
    name = f"adm-d-{unique}"
    metadata.create(name, 2)
    with CompositeProducer(stack, name, store=metadata) as producer:
        for seq in range(10):
            producer.produce(f"g{seq}", f"{seq}")
    with crashpoints.armed(point), pytest.raises(crashpoints.InjectedFault):
        metadata.delete(name)
    assert name in metadata.refresh(), "still defined after the cut"
    metadata.delete(name)
    assert name not in metadata.refresh()
    assert f"{name}.0" not in _storage_topics(metadata)
    again = metadata.create(name, 2)
    assert sum(metadata.broker.end_offsets([(again.storage_topics[0].name, p) for p in range(2)])) == 0, (
        "no old records"
    )


@pytest.mark.parametrize(
    ("point", "nth"),
    [
        ("subscription.registry.write", 1),  # the definition's tombstone, after RQ and DLQ went
        ("composite.delete.topics", 2),  # RQ deleted, DLQ not
        ("composite.metadata.write", 2),  # DLQ's storage topics deleted, its definition not
    ],
)
def test_subscription_delete_cut_then_run_again(
    stack: Settings, metadata: MetadataStore, unique: str, point: str, nth: int
) -> None:
    topic = f"adm-sd-{unique}"
    metadata.create(topic, 2)
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    try:
        sub = ops.create(registry, metadata, f"adm-sd-{unique}", topic, EndpointSpec("callable", "rec"))
        with crashpoints.armed(point, nth=nth), pytest.raises(crashpoints.InjectedFault):
            ops.delete(registry, metadata, sub.name)
        assert registry.get(sub.name).name == sub.name, "the definition stays until the end"
        ops.delete(registry, metadata, sub.name)
        with pytest.raises(NotFound):
            registry.get(sub.name)
        defined = metadata.refresh()
        assert sub.rq_topic not in defined and sub.dlq_topic not in defined
        assert not {f"{sub.rq_topic}.0", f"{sub.dlq_topic}.0"} & _storage_topics(metadata)
    finally:
        registry.close()


@pytest.mark.parametrize(
    ("point", "nth"),
    [
        ("subscription.registry.write", 1),  # stopping it
        ("composite.metadata.write", 1),  # RQ's new storage topic made, not defined
        ("composite.metadata.write", 2),  # RQ's new storage topic defined, producing not switched
        ("composite.metadata.write", 4),  # DLQ's likewise
        ("subscription.registry.write", 2),  # the new shard count and the resume
    ],
)
def test_change_shards_cut_then_run_again(
    stack: Settings, metadata: MetadataStore, unique: str, point: str, nth: int
) -> None:
    """A running subscription's change-shards that must add RQ/DLQ storage topics (MQ went from
    4 to 6 partitions; 3 shards cannot read the 4-partition RQ), cut at each of its writes and run
    again, ends as one clean run does: running, 3 shards, one 6-partition storage topic added to
    each of RQ and DLQ and produced to. Before, a cut after the stop left it stopped for good, and
    a cut before the switch added a second storage topic."""
    topic = f"adm-cs-{unique}"
    metadata.create(topic, 4)
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    try:
        sub = ops.create(
            registry, metadata, f"adm-cs-{unique}", topic, EndpointSpec("callable", "rec"), shard_count=2
        )
        metadata.add_storage_topic(topic, 6)  # T0 stays empty: the shards read from T1
        metadata.switch_produce(topic)
        ops.set_status(registry, sub.name, ops.Status.RUNNING)
        with crashpoints.armed(point, nth=nth), pytest.raises(crashpoints.InjectedFault):
            ops.change_shards(registry, metadata, sub.name, 3, stop_wait_s=5)
        changed = ops.change_shards(registry, metadata, sub.name, 3, stop_wait_s=5)
        assert (changed.status, changed.shard_count) == (ops.Status.RUNNING, 3)
        assert registry.get(sub.name) == changed and not changed.resume_after_change
        for internal in (sub.rq_topic, sub.dlq_topic):
            now = metadata.get(internal)
            assert [s.partitions for s in now.storage_topics] == [4, 6], internal
            assert now.produce_pointer == 1, internal
    finally:
        registry.close()
