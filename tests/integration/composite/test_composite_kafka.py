"""Composite topics on the real broker: metadata in Kafka, routed producers, Consume."""

from __future__ import annotations

import asyncio

import pytest

from app.composite import group_hash
from app.composite.consumer import consume
from app.composite.errors import CompositeTopicExists, ReadPointerOutOfRange, UnknownCompositeTopic
from app.composite.producer import AsyncCompositeProducer, CompositeProducer
from app.composite.store import MetadataStore
from app.settings import Settings

pytestmark = pytest.mark.integration


def test_definition_is_shared_through_the_metadata_topic(
    metadata: MetadataStore, stack: Settings, unique: str
) -> None:
    name = f"shared-{unique}"
    metadata.create(name, 4)
    other = MetadataStore.of(stack)  # a second process's view
    try:
        assert other.get(name).storage_topics[0].partitions == 4
        metadata.add_storage_topic(name, 8)
        metadata.switch_produce(name)
        seen = other.get(name)
        assert [t.name for t in seen.storage_topics] == [f"{name}.0", f"{name}.1"]
        assert seen.produce_pointer == 1
        assert seen.storage_topics[1].k == 2
    finally:
        other.close()
    with pytest.raises(CompositeTopicExists):
        metadata.create(name, 4)
    with pytest.raises(UnknownCompositeTopic):
        metadata.get(f"missing-{unique}")


def test_sync_producer_routes_every_message_to_its_partition(
    metadata: MetadataStore, stack: Settings, unique: str
) -> None:
    name = f"route-{unique}"
    metadata.create(name, 6)
    groups = [f"g{i}" for i in range(120)]
    with CompositeProducer(stack, name, store=metadata) as producer:
        for i in range(1200):
            producer.produce(groups[i % len(groups)], {"i": i})
    described = metadata.describe(name)
    ends = described["storage_topics"][0]["end_offsets"]  # type: ignore[index]
    assert sum(ends) == 1200
    expected = [0] * 6
    for gid in groups:
        expected[metadata.get(name).storage_topics[0].route(group_hash(gid))] += 10
    assert ends == expected
    first = consume(metadata, name, 0, expected.index(max(expected)), 0, max_messages=5)
    assert len(first) == 5
    assert [m.offset for m in first] == [0, 1, 2, 3, 4]
    assert all(
        metadata.get(name).storage_topics[0].route(group_hash(m.group_id)) == m.partition for m in first
    )
    with pytest.raises(ReadPointerOutOfRange):
        consume(metadata, name, 0, 0, 10_000)
    with pytest.raises(ReadPointerOutOfRange):
        consume(metadata, name, 1, 0, 0)


async def test_async_producer_follows_switch_produce(
    metadata: MetadataStore, stack: Settings, unique: str
) -> None:
    name = f"switch-{unique}"
    metadata.create(name, 2)
    fast = stack.model_copy(update={"metadata_refresh_s": 0.0})
    producer = AsyncCompositeProducer(fast, name)
    try:
        before = await asyncio.gather(*(producer.produce(f"g{i}", b"x") for i in range(50)))
        assert {d.topic for d in before} == {f"{name}.0"}
        metadata.add_storage_topic(name, 4)
        metadata.switch_produce(name)
        after = await asyncio.gather(*(producer.produce(f"g{i}", b"y") for i in range(50)))
        assert {d.topic for d in after} == {f"{name}.1"}
        # Shard consistency with 2 shards: each group stays in its shard after the switch.
        for b, a in zip(before, after, strict=True):
            assert b.partition * 2 // 2 == a.partition * 2 // 4
    finally:
        await producer.close()
