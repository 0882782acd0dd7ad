"""A group state record that does not decode, in the GroupState table's changelog (one whose RQ
position holds a null, as a copy delivered without an offset left it after a broker restart):
the restarted worker's shard opens all the same, taking the record as a write that never
landed, and delivers every group's messages in order. Before, loading it raised a TypeError in
`GroupState.from_json` at every start of the shard, for ever, and no group of the shard was
delivered again."""

from __future__ import annotations

import orjson
import pytest
from confluent_kafka import Producer

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.ordered.rules import GroupState
from app.settings import Settings
from app.subscription.statelog import changelog_topic, state_key
from tests.integration.subscription.conftest import Endpoint, Workers, started_http_subscription
from tests.integration.subscription.inprocess import last_delivery_order
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.integration

GROUPS, PER_ROUND = 6, 5


def _produce(stack: Settings, metadata: MetadataStore, topic: str, seqs: range) -> None:
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in seqs:
            producer.produce(f"g{seq % GROUPS}", f"g{seq % GROUPS}:{seq}")


@pytest.mark.timeout(240)
async def test_a_shard_opens_past_a_state_record_that_does_not_decode(
    stack: Settings, metadata: MetadataStore, workers: Workers, endpoint: Endpoint, unique: str
) -> None:
    topic = f"badstate-{unique}"
    groups = [f"g{i}" for i in range(GROUPS)]
    sub, _ = started_http_subscription(stack, metadata, workers, endpoint, topic, 0.3)

    async def delivered(upto: int) -> None:
        want = {g: [s for s in range(upto) if s % GROUPS == int(g[1:])] for g in groups}
        await async_wait_until(
            lambda: all(set(want[g]) <= set(endpoint.delivered[g]) for g in groups),
            120,
            f"every group's messages below {upto} at the endpoint",
        )
        for g in groups:
            assert last_delivery_order(endpoint.delivered[g]) == want[g], f"{g}: {endpoint.delivered[g]}"

    port = 18000 + int(unique[:4], 16) % 900
    first = range(GROUPS * PER_ROUND)
    _produce(stack, metadata, topic, first)
    workers.start(port)
    await delivered(first.stop)
    workers.stop_all()

    bad = GroupState().to_json() | {"rq": {"p": [0, 3, 0, None], "c": None}}
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    producer.produce(
        changelog_topic(workers.app_id),
        key=state_key(sub.state_scope, "g1"),
        value=orjson.dumps({"e": 1_000_000, "s": bad}),  # the newest epoch: it would win
        partition=0,
    )
    assert producer.flush(30) == 0

    second = range(first.stop, 2 * first.stop)
    _produce(stack, metadata, topic, second)
    workers.start(port)
    await delivered(second.stop)
