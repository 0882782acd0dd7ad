"""RQ fast-forwarded past a group's failed head (an operator skipping poison messages, or RQ
retention): the group's later messages are delivered again. Before, the group state still named
the skipped head, so every later message was sidelined to RQ, read back and sidelined again,
forever."""

from __future__ import annotations

import pytest

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.ordered.policy import RetryPolicy
from app.settings import Settings
from app.subscription import ops
from app.subscription.errors import EndpointUnavailable
from app.subscription.memory import MemoryStates
from app.subscription.model import EndpointSpec
from app.subscription.records import SubscriptionMessage
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.inprocess import running_shards, wait_until

pytestmark = pytest.mark.integration


@pytest.mark.timeout(120)
async def test_a_group_whose_failed_head_was_fast_forwarded_past_is_delivered_again(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic = f"subff-{unique}"
    metadata.create(topic, 1)
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    retry = RetryPolicy(max_attempts=5, min_backoff_s=30.0, max_backoff_s=30.0)  # the head waits in RQ
    sub = ops.create(registry, metadata, f"subff-{unique}", topic, EndpointSpec("callable", "x"), retry=retry)

    def produce(first: int, last: int) -> None:
        with CompositeProducer(stack, topic, store=metadata) as producer:
            for seq in range(first, last):
                producer.produce("g", f"g:{seq}")

    delivered: list[int] = []

    async def poison_first(message: SubscriptionMessage) -> None:
        seq = int(message.payload.decode().split(":")[1])
        if seq == 0:
            raise EndpointUnavailable("poison: the endpoint answers 503 to it")
        delivered.append(seq)

    states = MemoryStates()  # the group state outlives the restart, as the state table does
    produce(0, 5)
    async with running_shards(stack, sub, metadata, endpoint=poison_first, states=states) as shards:
        await wait_until(lambda: shards[0].stats.sidelined >= 5, 30, "the head and its followers in RQ")
    assert delivered == []

    ops.reset_offset(registry, metadata, sub.name, "rq", storage_idx=0, offset=10_000)  # skip them all
    produce(5, 8)
    async with running_shards(stack, sub, metadata, endpoint=poison_first, states=states) as shards:
        await wait_until(lambda: delivered == [5, 6, 7], 30, "the messages after the fast-forward")
    assert states.get("g") is None or states.get("g").retry_head is None  # type: ignore[union-attr]
