"""Subscription crash points: a shard fails at each of its writes, starts again on the group states
it had written, and its subscribers still see every message, in each group's order.

What the subscriber sees is what is checked: the endpoint's deliveries and the DLQ's records. A
redelivery is allowed (at least once), but only as a replay: taking each message's *last*
delivery, a group's messages must still come in produce order, and each dead-lettered message is
in DLQ once. Before the shard adopted the copies its states lacked (app/subscription/orphans.py),
a crash between the broker's confirmation of an RQ copy and the state write let the MQ replay
deliver the group on, and the copy came out of RQ afterwards: a message delivered after its
group's later ones. A crash after a DLQ copy put the message in DLQ twice.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.crashpoints import InjectedFault, armed
from app.kafka.broker import broker_for
from app.kafka.reading import read_to_end
from app.ordered.policy import OnDlq, RetryPolicy
from app.settings import Settings
from app.subscription import ops
from app.subscription.errors import EndpointRejected, EndpointUnavailable
from app.subscription.memory import MemoryStates
from app.subscription.model import EndpointSpec
from app.subscription.records import SubscriptionMessage
from app.subscription.registry import SubscriptionRegistry
from app.subscription.runner import ShardRunner
from tests.integration.subscription.inprocess import wait_until

pytestmark = pytest.mark.integration

GROUPS, PER_GROUP = 4, 6
RETRIED = {"g0:1", "g2:3"}  # refused once with a 503, then taken
REJECTED = {"g1:2"}  # refused for good (400): DLQ, and the group blocked behind it


class Subscriber:
    """The endpoint: what it took, in the order it took it."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.refused_once: set[str] = set()

    async def __call__(self, message: SubscriptionMessage) -> None:
        text = message.payload.decode()
        if text in REJECTED:
            raise EndpointRejected(f"{text}: 400")
        if text in RETRIED and text not in self.refused_once:
            self.refused_once.add(text)
            raise EndpointUnavailable(f"{text}: 503 once")
        self.seen.append(text)


def expected_delivered() -> list[str]:
    out = []
    for g in range(GROUPS):
        for seq in range(PER_GROUP):
            if g == 1 and seq >= 2:  # g1:2 is dead-lettered; BLOCK_GROUP sends its followers after it
                continue
            out.append(f"g{g}:{seq}")
    return out


def check_subscriber_view(seen: list[str], dead: list[str]) -> None:
    assert sorted(set(seen)) == sorted(expected_delivered()), "every deliverable message delivered"
    assert sorted(dead) == [f"g1:{seq}" for seq in range(2, PER_GROUP)], "each blocked message in DLQ once"
    last: dict[str, int] = {text: i for i, text in enumerate(seen)}
    by_group: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for text, at in last.items():
        group, seq = text.split(":")
        by_group[group].append((at, int(seq)))
    for group, marks in by_group.items():
        in_delivery_order = [seq for _, seq in sorted(marks)]
        assert in_delivery_order == sorted(in_delivery_order), f"{group}: out of order: {seen}"


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "point",
    [
        "subscription.rq.confirmed",  # the copy is in RQ; the state does not say so
        "subscription.dlq.confirmed",  # the copy is in DLQ; the state does not say so
        "subscription.offsets.commit",  # states written, offsets not committed
        "subscription.state.forget",  # a recovered group's state about to be dropped
    ],
)
async def test_a_shard_crashed_at_a_write_still_delivers_every_group_in_order(
    stack: Settings, metadata: MetadataStore, unique: str, point: str
) -> None:
    topic = f"subcp-{unique}"
    metadata.create(topic, 2)
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    # Retries wait long enough for the restarted shard to read MQ again before the copy is due.
    retry = RetryPolicy(max_attempts=5, min_backoff_s=3.0, max_backoff_s=3.0)
    sub = ops.create(
        registry,
        metadata,
        f"subcp-{unique}",
        topic,
        EndpointSpec("callable", "x"),
        retry=retry,
        on_dlq=OnDlq.BLOCK_GROUP,
    )
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in range(PER_GROUP):
            for g in range(GROUPS):
                producer.produce(f"g{g}", f"g{g}:{seq}")
    subscriber = Subscriber()
    states = MemoryStates()  # what the state table holds: every state written before the crash

    def runner() -> ShardRunner:
        return ShardRunner(stack, sub, 0, states, subscriber, metadata)

    with armed(point, nth=1, action="raise") as trigger:
        crashed = asyncio.create_task(runner().run())
        with pytest.raises(InjectedFault):
            await asyncio.wait_for(crashed, 60)
        assert trigger.fired

    again = runner()
    task = asyncio.create_task(again.run())
    try:
        await wait_until(
            lambda: (
                set(expected_delivered()) <= set(subscriber.seen)
                and len(dlq(stack, metadata, sub.dlq_topic)) >= 4
            ),
            60,
            "every message delivered or dead-lettered after the restart",
        )
        await wait_until(lambda: not again.stats.rq_buffered, 30, "RQ drained")
    finally:
        again.stop()
        await task
    check_subscriber_view(subscriber.seen, dlq(stack, metadata, sub.dlq_topic))


def dlq(stack: Settings, metadata: MetadataStore, name: str) -> list[str]:
    return [
        value.decode()
        for storage in metadata.get(name).storage_topics
        for _key, value in read_to_end(broker_for(stack), storage.name)
    ]
