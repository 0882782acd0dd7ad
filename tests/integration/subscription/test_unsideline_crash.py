"""`dlq unsideline` cut at its writes (the point raises in the command's process, as a refused or
lost write would): after the replay copies went to RQ (`subscription.unsideline.rq_copy`, second
copy), before the groups' new states were written (`subscription.unsideline.states`), or after
them, before the epoch bump (`subscription.registry.write`). The command fails; run again, it
replays everything selected (nothing, when the states were written); started, the subscription
delivers every replayed message, each group in produce order at each message's last delivery, and
a new message of the group after them. The copies of the cut run are read before the re-run's (at
most a redelivery, never a message ahead of an earlier one)."""

from __future__ import annotations

import asyncio

import pytest

from app import crashpoints
from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import EndpointSpec, Status
from app.subscription.registry import SubscriptionRegistry
from app.subscription.replay import ReplaySelection
from app.subscription.unsideline import unsideline
from tests.integration.subscription.conftest import Endpoint, Workers
from tests.integration.subscription.inprocess import last_delivery_order, wait_until
from tests.support.soak import first_in_every_suite

GROUPS = [f"g{i}" for i in range(6)]
MESSAGES = 60


@pytest.mark.parametrize(
    ("point", "hit"),
    first_in_every_suite(
        [
            ("subscription.unsideline.rq_copy", 2),
            ("subscription.unsideline.states", 1),
            # the states written, the epoch not bumped (under `-m soak`: other commands are cut at
            # this write in every suite, tests/integration/subscription/test_admin_crash_points.py)
            ("subscription.registry.write", 1),
        ],
        2,
    ),
)
async def test_unsideline_cut_at_its_writes_then_run_again(
    stack: Settings,
    metadata: MetadataStore,
    workers: Workers,
    endpoint: Endpoint,
    unique: str,
    point: str,
    hit: int,
) -> None:
    topic = f"subx-{unique}"
    metadata.create(topic, 2)
    produced: dict[str, list[int]] = {g: [] for g in GROUPS}
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in range(MESSAGES):
            g = GROUPS[seq % len(GROUPS)]
            producer.produce(g, f"{g}:{seq}")
            produced[g].append(seq)
    fixed = "g3"
    endpoint.broken = {str(produced[fixed][2])}  # 404: to DLQ, and the group's later messages follow
    registry = SubscriptionRegistry(
        broker_for(stack), workers.registry_topic, replication_factor=stack.kafka_replication_factor
    )
    try:
        sub = ops.create(
            registry, metadata, f"subx-{unique}", topic, EndpointSpec("http", endpoint.url, 5.0), start=True
        )
        proc = workers.start(16000 + int(unique[:4], 16) % 900)
        in_dlq = len(produced[fixed]) - 2

        def settled() -> bool:
            assert proc.poll() is None, "worker died; see its log in the test's tmp dir"
            return sum(map(len, endpoint.delivered.values())) == MESSAGES - in_dlq

        await wait_until(settled, 90, "the rest delivered, the fixed group in DLQ")
        ops.set_status(registry, sub.name, Status.STOPPED)
        await asyncio.to_thread(ops.wait_stopped, registry, sub.name, 30.0)
        endpoint.broken = set()

        settings = stack.model_copy(update={"app_id": workers.app_id})
        everything = ReplaySelection()
        with crashpoints.armed(point, nth=hit), pytest.raises(crashpoints.InjectedFault):
            await asyncio.to_thread(unsideline, settings, registry, metadata, sub.name, everything)
        report = await asyncio.to_thread(unsideline, settings, registry, metadata, sub.name, everything)
        # cut after the states were written, the re-run finds nothing left to replay
        assert report["replayed"] == (0 if point == "subscription.registry.write" else in_dlq)
        ops.set_status(registry, sub.name, Status.RUNNING)
        with CompositeProducer(stack, topic, store=metadata) as producer:
            producer.produce(fixed, f"{fixed}:{MESSAGES}")  # after the replays in its group's order
        await wait_until(
            lambda: endpoint.delivered[fixed][-1:] == [MESSAGES], 90, "the replays, then the new message"
        )
        assert last_delivery_order(endpoint.delivered[fixed]) == [*produced[fixed], MESSAGES]
        for g in GROUPS:
            if g != fixed:
                assert endpoint.delivered[g] == produced[g]
    finally:
        registry.close()
