"""A failure that is not the endpoint's (the broker did not confirm an RQ copy) stops the shard's
lanes: it is raised at once, while another group's delivery still runs, and that delivery is
cancelled, not left running while the shard restarts; nothing past the failed record commits."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import ConsumerRecord

from app.composite.producer import ProduceFailed
from app.ordered.lanes import GroupLanes
from app.ordered.rules import Position
from app.ordered.work import Work
from app.settings import Settings
from app.subscription.delivery import Delivery, ShardStats, main_work
from app.subscription.errors import EndpointUnavailable
from app.subscription.memory import MemoryStates
from app.subscription.model import EndpointSpec, Subscription
from app.subscription.records import SubscriptionMessage


def record(group: str, offset: int) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord("mq.0", 0, offset, 0, 0, group.encode(), b"x", None, 1, 1, [])


async def test_an_unconfirmed_rq_copy_stops_the_lanes_and_cancels_the_other_groups() -> None:
    sub = Subscription("s", "mq", EndpointSpec("http", "http://127.0.0.1:1/"))
    slow_started, slow_cancelled = asyncio.Event(), asyncio.Event()

    async def endpoint(message: SubscriptionMessage) -> None:
        if message.group_id == "failing":
            await slow_started.wait()
            raise EndpointUnavailable("503")
        slow_started.set()
        try:
            await asyncio.Event().wait()  # an endpoint that takes its time
        except asyncio.CancelledError:
            slow_cancelled.set()
            raise

    async def produce_to(queue: str, group: str, rec: object, headers: object) -> Position:
        raise ProduceFailed(f"{queue}: not confirmed")

    delivery = Delivery(Settings(), sub, MemoryStates(), ShardStats(), produce_to, 0, endpoint)
    items = [main_work(record("failing", 0), 0, 256), main_work(record("slow", 1), 0, 256)]
    lanes: GroupLanes[int, str, Work] = GroupLanes(delivery.handle_within_limit, 100)
    for work in items:
        lanes.take(0, work.record.offset, work.ordering_key, work)
    with pytest.raises(ProduceFailed):  # at once: the slow group's call never ends by itself
        await asyncio.wait_for(lanes.drain(), 10)
    assert not slow_cancelled.is_set()
    await lanes.cancel()
    assert slow_cancelled.is_set(), "the other group's delivery was cancelled"
    assert lanes.committable() == {0: 0}, "nothing committable past the failed record"
