"""A group's long backoff holds no other group, on the real broker: group `slow` fails four times
(its fourth copy waits 8 s in RQ), then group `fast` fails once behind it in the same RQ
partition (its copy is due after 1 s). `fast` must be delivered before `slow`. Before, a shard
took RQ copies only from the head of the partition: `fast` waited for `slow`'s backoff."""

from __future__ import annotations

from collections import Counter

import pytest

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.ordered.policy import RetryPolicy
from app.settings import Settings
from app.subscription.errors import EndpointUnavailable
from app.subscription.records import SubscriptionMessage
from tests.integration.subscription.inprocess import callable_subscription, running_shards, wait_until

pytestmark = pytest.mark.integration
FAILURES = {"slow": 4, "fast": 1}  # attempts that fail, per group


async def test_a_due_retry_is_not_held_behind_another_groups_backoff(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic, name = f"hol-{unique}", f"hol-sub-{unique}"
    metadata.create(topic, 1)
    sub = callable_subscription(stack, metadata, unique, name, topic, shard_count=1)
    sub = sub.bump(retry=RetryPolicy(max_attempts=6, min_backoff_s=1.0, max_backoff_s=60.0))
    assert metadata.get(sub.rq_topic).storage_topics[0].partitions == 1, "both groups share RQ[0]"
    attempts: Counter[str] = Counter()
    delivered: list[str] = []

    async def endpoint(m: SubscriptionMessage) -> None:
        attempts[m.group_id] += 1
        if (m.group_id == "slow" and attempts["slow"] <= 4) or (
            m.group_id == "fast" and attempts["fast"] == 1
        ):
            raise EndpointUnavailable("not yet")
        delivered.append(m.group_id)

    async with running_shards(stack, sub, metadata, endpoint):
        with CompositeProducer(stack, topic, store=metadata) as producer:
            producer.produce("slow", "slow:0")
        await wait_until(lambda: attempts["slow"] == 4, 30, "slow's fourth failure (its copy waits 8 s)")
        with CompositeProducer(stack, topic, store=metadata) as producer:
            producer.produce("fast", "fast:0")
        await wait_until(lambda: len(delivered) == 2, 60, "both groups delivered")
    assert delivered == ["fast", "slow"], "fast's retry came due first and ran first"
    assert attempts == {"slow": 5, "fast": 2}
