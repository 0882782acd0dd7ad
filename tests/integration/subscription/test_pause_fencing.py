"""A worker paused past its session timeout (SIGSTOP), its shards taken over, then resumed
(SIGCONT), once while messages flow (three times under `-m soak`), with an HTTP endpoint
failing on purpose. The resumed worker's leases have run out (`app.ordered.lease`): it must not
deliver, write a copy or commit for a shard the other worker now owns.

Counted at the endpoint: nothing missing, and per group no older message after a newer one
unless the whole run after it follows again (the replay a restart may make); every group ends on
its newest message."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest

from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.ordered.policy import RetryPolicy
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import EndpointSpec
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.conftest import (
    Endpoint,
    Workers,
    assert_group_order,
    produce_groups,
    shards_running,
)
from tests.support.waiting import async_wait_until

GROUPS = 200
CHUNK = 1000
LEASE_S = "3"


async def _produce(stack: Settings, topic: str, seqs: range) -> None:
    await asyncio.to_thread(produce_groups, stack, topic, seqs, GROUPS)


@pytest.mark.parametrize("pauses", [1, pytest.param(3, marks=pytest.mark.soak)])
async def test_a_paused_worker_resumed_after_its_takeover_delivers_nothing_stale(
    stack: Settings,
    metadata: MetadataStore,
    workers: Workers,
    endpoint: Endpoint,
    unique: str,
    pauses: int,
) -> None:
    topic = f"pause-{unique}"
    metadata.create(topic, 4)
    groups = [f"g{i}" for i in range(GROUPS)]
    endpoint.transient = set(groups[: GROUPS // 10])  # their messages go through RQ
    registry = SubscriptionRegistry(
        broker_for(stack), workers.registry_topic, replication_factor=stack.kafka_replication_factor
    )
    sub = ops.create(
        registry,
        metadata,
        topic,
        topic,
        EndpointSpec("http", endpoint.url, 5.0),
        shard_count=2,
        retry=RetryPolicy(max_attempts=10, min_backoff_s=0.2, max_backoff_s=0.5),
        start=True,
    )
    base = 18000 + int(unique[:4], 16) % 900
    ports = [base, base + 1]
    for port in ports:
        workers.start(port, SUBSCRIPTION_LEASE_S=LEASE_S)

    async def runs_both(port: int) -> bool:
        return await shards_running(port, sub.name) == {0, 1}

    async def some_worker_runs_shards() -> int:
        """The port of a worker running a shard (both running 0 and 1 between them)."""
        running = {port: await shards_running(port, sub.name) for port in ports}
        if set().union(*running.values()) != {0, 1}:
            return 0
        return next(port for port in ports if running[port])

    total = 0
    for _pause in range(pauses):
        paused = await async_wait_until(
            some_worker_runs_shards, 120, "both shards running", poll_s=0.5, retry_on=(httpx.HTTPError,)
        )
        await _produce(stack, topic, range(total, total + CHUNK))
        total += CHUNK
        other = ports[1 - ports.index(paused)]
        workers.procs[paused].send_signal(signal.SIGSTOP)
        try:
            await _produce(stack, topic, range(total, total + CHUNK // 2))
            total += CHUNK // 2

            async def other_runs_both(port: int = other) -> bool:
                return await runs_both(port)

            await async_wait_until(
                other_runs_both,
                120,
                "the other worker running both shards",
                poll_s=0.5,
                retry_on=(httpx.HTTPError,),
            )
            await _produce(stack, topic, range(total, total + CHUNK // 2))
            total += CHUNK // 2
        finally:
            workers.procs[paused].send_signal(signal.SIGCONT)

    def all_delivered() -> bool:
        return sum(len(set(v)) for v in endpoint.delivered.values()) >= total

    await async_wait_until(all_delivered, 180, f"all {total} messages delivered", poll_s=0.5)
    await asyncio.to_thread(ops.set_status, registry, sub.name, ops.Status.STOPPED)
    delivered = {s for g in groups for s in endpoint.delivered[g]}
    assert delivered == set(range(total)), f"missing {sorted(set(range(total)) - delivered)[:20]}"
    assert_group_order(endpoint, range(total), GROUPS)
