"""Acceptance: two `hubstream worker` processes, storage-topic switch, shard-count change,
kill -9 of one worker and its restart, with an HTTP endpoint failing on purpose.

Afterwards every message is delivered or in DLQ, per group the delivered order is the produce
order (a duplicate may only repeat the message just delivered), and duplicates are counted.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.ordered.policy import RetryPolicy
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import EndpointSpec
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.conftest import Endpoint, Workers, produce_groups, shards_running
from tests.support.waiting import async_wait_until

MESSAGES = 20_000
GROUPS = 500


async def _produce(
    stack: Settings, metadata: MetadataStore, topic: str, seqs: range, produced: dict[str, list[int]]
) -> None:
    await asyncio.to_thread(produce_groups, stack, topic, seqs, GROUPS, produced)


async def test_acceptance_failover_switch_and_reshard(
    stack: Settings, metadata: MetadataStore, workers: Workers, endpoint: Endpoint, unique: str
) -> None:
    topic = f"acc-{unique}"
    metadata.create(topic, 4)
    groups = [f"g{i}" for i in range(GROUPS)]
    endpoint.transient = set(groups[:25])
    produced: dict[str, list[int]] = {g: [] for g in groups}
    endpoint.broken = {
        str(seq) for seq in range(40 + 3 * GROUPS, 40 + 3 * GROUPS + 5)
    }  # 5 groups fail for good
    registry = SubscriptionRegistry(
        broker_for(stack), workers.registry_topic, replication_factor=stack.kafka_replication_factor
    )
    sub = ops.create(
        registry,
        metadata,
        f"acc-{unique}",
        topic,
        EndpointSpec("http", endpoint.url, 5.0),
        shard_count=2,
        retry=RetryPolicy(max_attempts=4, min_backoff_s=0.2, max_backoff_s=0.5),
        start=True,
    )
    base = 17000 + int(unique[:4], 16) % 900
    workers.start(base)
    workers.start(base + 1)
    await _produce(stack, metadata, topic, range(0, MESSAGES // 2), produced)
    await async_wait_until(
        lambda: sum(map(len, endpoint.delivered.values())) >= 2000, 90, "2,000 deliveries (shards running)"
    )
    metadata.add_storage_topic(topic, 8)
    metadata.switch_produce(topic)
    await _produce(stack, metadata, topic, range(MESSAGES // 2, 3 * MESSAGES // 4), produced)
    await async_wait_until(  # the shards follow the switch before they are reshaped
        lambda: any(seq >= MESSAGES // 2 for seqs in endpoint.delivered.values() for seq in seqs),
        90,
        "a message of the new storage topic delivered",
    )
    await asyncio.to_thread(ops.change_shards, registry, metadata, sub.name, 4)  # waits for the stop
    await async_wait_until(
        lambda: sum(map(len, endpoint.delivered.values())) >= 8000, 90, "8,000 deliveries after the reshard"
    )
    delivered_before_kill = sum(map(len, endpoint.delivered.values()))
    workers.kill9(base + 1)
    await _produce(stack, metadata, topic, range(3 * MESSAGES // 4, MESSAGES), produced)

    # The killed worker stays down until the survivor runs every shard (its group session ended).
    async def survivor_runs_all() -> bool:
        return await shards_running(base, sub.name) == {0, 1, 2, 3}

    await async_wait_until(
        survivor_runs_all,
        90,
        "the surviving worker running all 4 shards",
        poll_s=0.5,
        retry_on=(httpx.HTTPError,),
    )
    workers.start(base + 1)
    deadline = time.monotonic() + 150
    dlq: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        got = sum(len(set(v)) for v in endpoint.delivered.values())
        if got >= MESSAGES - 200:
            dlq = await asyncio.to_thread(
                ops.dlq_list,
                workers.settings_of_workers(),
                metadata,
                registry.get(sub.name),
                None,
                None,
                None,
                None,
                100_000,
            )
            if got + len(dlq) >= MESSAGES:
                break
        await asyncio.sleep(2)
    await asyncio.to_thread(ops.set_status, registry, sub.name, ops.Status.STOPPED)
    in_dlq = {int(str(e["payload"]).split(":")[1]) for e in dlq}
    duplicates = 0
    for g in groups:
        seqs = endpoint.delivered[g]
        assert seqs == sorted(seqs), f"{g}: a message was delivered after a later one: {seqs}"
        duplicates += len(seqs) - len(set(seqs))
    all_delivered = {s for g in groups for s in endpoint.delivered[g]}
    assert all_delivered | in_dlq == set(range(MESSAGES)), (
        f"missing {len(set(range(MESSAGES)) - all_delivered - in_dlq)}"
    )
    print(f"delivered before kill={delivered_before_kill} duplicates={duplicates} dlq={len(dlq)}")
