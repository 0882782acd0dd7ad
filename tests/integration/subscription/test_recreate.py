"""A subscription deleted and created again under the same name is a new subscription: its own
consumer group and group states. Before, it inherited the old one's committed offsets on the
re-created RQ storage topic (and its group states), so its first retry copies were never read:
lost."""

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
from app.subscription.model import EndpointSpec, Subscription
from app.subscription.records import SubscriptionMessage
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.inprocess import running_shards, wait_until

pytestmark = pytest.mark.integration


class FailsOnce:
    """Refuses each listed message once (a retriable 503), then takes it."""

    def __init__(self, fail: set[str]) -> None:
        self.fail = set(fail)
        self.delivered: list[str] = []

    async def __call__(self, message: SubscriptionMessage) -> None:
        text = message.payload.decode()
        if text in self.fail:
            self.fail.discard(text)
            raise EndpointUnavailable(f"{text}: 503 once")
        self.delivered.append(text)


def test_a_recreated_subscription_has_its_own_group_and_states() -> None:
    first = Subscription("orders", "t", EndpointSpec("callable", "x"), incarnation="a1")
    second = Subscription("orders", "t", EndpointSpec("callable", "x"), incarnation="b2")
    assert first.consumer_group != second.consumer_group
    assert first.state_scope != second.state_scope
    assert Subscription.from_json(first.to_json()) == first
    assert Subscription("orders", "t", EndpointSpec("callable", "x")).consumer_group == "hubstream-sub-orders"


@pytest.mark.timeout(120)
async def test_a_recreated_subscription_reads_its_own_retry_copies(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic, name = f"subre-{unique}", f"subre-{unique}"
    metadata.create(topic, 1)
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    retry = RetryPolicy(max_attempts=3, min_backoff_s=0.1, max_backoff_s=0.1)

    def produce(texts: list[str]) -> None:
        with CompositeProducer(stack, topic, store=metadata) as producer:
            for text in texts:
                producer.produce(text.split(":")[0], text)

    old_life = [f"g{i}:old" for i in range(6)]
    produce(old_life)
    sub = ops.create(registry, metadata, name, topic, EndpointSpec("callable", "x"), retry=retry)
    endpoint = FailsOnce(set(old_life))  # every message goes through RQ once: RQ offsets get committed
    # The group-state table keeps states by scope, and outlives a delete like the real table does.
    table: dict[str, MemoryStates] = {}
    states = table.setdefault(sub.state_scope, MemoryStates())
    async with running_shards(stack, sub, metadata, endpoint=endpoint, states=states):
        await wait_until(lambda: sorted(endpoint.delivered) == sorted(old_life), 30, "the first life")

    registry.delete(name)
    for internal in (sub.rq_topic, sub.dlq_topic):
        metadata.delete(internal)
    again = ops.create(registry, metadata, name, topic, EndpointSpec("callable", "x"), retry=retry)
    new_life = ["g0:new", "g1:new"]
    produce(new_life)
    endpoint = FailsOnce({"g0:new"})  # its copy is the first record of the re-created RQ
    states = table.setdefault(again.state_scope, MemoryStates())
    async with running_shards(stack, again, metadata, endpoint=endpoint, states=states):
        await wait_until(lambda: set(new_life) <= set(endpoint.delivered), 30, "the retried message")
    assert sorted(endpoint.delivered) == sorted(old_life + new_life), (
        "a new subscription reads MQ from its start"
    )
