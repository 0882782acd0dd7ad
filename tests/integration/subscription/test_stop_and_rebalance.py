"""Shard ownership between workers, through `hubstream worker` processes:

- a stop confirmed while a worker is paused (SIGSTOP) fences the worker's lanes: resumed
  (SIGCONT), it commits nothing more, and sends at most the endpoint calls it had started before
  the pause (no more than SUBSCRIPTION_MAX_IN_FLIGHT), which the next run repeats in order.
  Confirming by the workers' shard marks (a mark older than 30 s counted as a dead worker's) let
  a worker whose lease outlasts that go on: resumed, it delivered and committed again. An
  operation cut mid-fence (its claim written and the worker's lease waited out, its release
  never written) leaves its own claim standing: the same operation run again fences that claim
  too, and the paused worker still acts no more;
- a rebalance (a second worker joins) stops only the shards whose slot moves: the shards that
  stay keep running under the claim they had."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import httpx
import pytest

from app import crashpoints
from app.composite.store import MetadataStore
from app.kafka.admin import committed_offsets
from app.kafka.broker import broker_for
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import EndpointSpec
from app.subscription.owners import lane_of
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.conftest import (
    Endpoint,
    Workers,
    assert_group_order,
    produce_groups,
    shards_running,
    started_http_subscription,
)
from tests.support.waiting import async_wait_until

GROUPS = 50
LONG_LEASE_S = 35
MESSAGES = 8_000


def _delivered(endpoint: Endpoint) -> int:
    return sum(len(v) for v in endpoint.delivered.values())


async def _shards(web_port: int) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=2.0) as http:
        answer: dict[str, Any] = (await http.get(f"http://127.0.0.1:{web_port}/subscriptions/shards")).json()
    return answer


# The cut run checks all that the plain one does, after its re-run; the plain one runs under soak.
@pytest.mark.parametrize(
    "cut_mid_fence",
    [pytest.param(True, id="fence-cut"), pytest.param(False, marks=pytest.mark.soak, id="fenced")],
)
async def test_a_stop_fences_a_paused_worker_which_acts_no_more_once_resumed(
    stack: Settings,
    metadata: MetadataStore,
    workers: Workers,
    endpoint: Endpoint,
    unique: str,
    cut_mid_fence: bool,
) -> None:
    name = f"fence-{unique}"
    sub, registry = started_http_subscription(stack, metadata, workers, endpoint, name, 0.2)
    port = 18900 + int(unique[:4], 16) % 90
    # A lease longer than the 30 s after which a shard mark counted as a dead worker's: the
    # resumed worker's own lease still holds, so only the fence keeps it from acting.
    workers.start(port, SUBSCRIPTION_LEASE_S=str(LONG_LEASE_S))
    try:
        await asyncio.to_thread(produce_groups, stack, name, range(MESSAGES), GROUPS)
        await async_wait_until(lambda: _delivered(endpoint) >= 1000, 120, "deliveries under way")
        workers.procs[port].send_signal(signal.SIGSTOP)
        try:
            await asyncio.to_thread(ops.set_status, registry, name, ops.Status.STOPPED)
            if cut_mid_fence:  # as a killed operation would: its claim stays, its release never lands
                with (
                    crashpoints.armed("subscription.owner.release") as cut,
                    pytest.raises(crashpoints.InjectedFault),
                ):
                    await asyncio.to_thread(ops.wait_stopped, registry, name, 2.0)
                assert cut.fired
            fenced = await asyncio.to_thread(ops.wait_stopped, registry, name, 2.0)
            assert fenced == [lane_of(name, 0)]  # paused holding it: released by no one but the fence
            before = _delivered(endpoint)
            places = metadata.get(name).partitions
            committed = await asyncio.to_thread(
                committed_offsets, stack.bootstrap, sub.consumer_group, places
            )
            assert before < MESSAGES, "everything was delivered before the pause: nothing to fence"
        finally:
            workers.procs[port].send_signal(signal.SIGCONT)

        async def shard_gone() -> bool:
            return not await shards_running(port, name)

        await async_wait_until(
            shard_gone, 60, "the resumed worker to drop the shard", retry_on=(httpx.HTTPError,)
        )
        leaked = _delivered(endpoint) - before
        assert leaked <= stack.subscription_max_in_flight, f"{leaked} deliveries after the fence"
        after = await asyncio.to_thread(committed_offsets, stack.bootstrap, sub.consumer_group, places)
        assert after == committed, f"the fenced worker committed after the stop: {committed} -> {after}"
        # started again, the subscription delivers the rest (the lane was released by the fence)
        await asyncio.to_thread(ops.set_status, registry, name, ops.Status.RUNNING)
        await async_wait_until(
            lambda: {s for v in endpoint.delivered.values() for s in v} == set(range(MESSAGES)),
            180,
            "every message delivered after the restart",
        )
        assert_group_order(endpoint, range(MESSAGES), GROUPS)  # what leaked is repeated as a whole run
    finally:
        registry.close()


async def test_a_rebalance_stops_only_the_shards_whose_slot_moves(
    stack: Settings, metadata: MetadataStore, workers: Workers, endpoint: Endpoint, unique: str
) -> None:
    name = f"rebal-{unique}"
    metadata.create(name, 4)
    registry = SubscriptionRegistry(
        broker_for(stack), workers.registry_topic, replication_factor=stack.kafka_replication_factor
    )
    try:
        own = ops.create(
            registry, metadata, name, name, EndpointSpec("http", endpoint.url, 5.0), shard_count=4, start=True
        )
        env = {"SUBSCRIPTION_SHARD_SLOTS": "4", "SUBSCRIPTION_LEASE_S": "3"}
        base = 18800 + int(unique[:4], 16) % 90
        first, second = base, base + 1
        workers.start(first, **env)

        async def claimed(port: int) -> dict[int, int]:
            """The shards of the subscription running on `port`, by the lane claim they act under."""
            shards = (await _shards(port))["shards"]
            return {
                s["shard"]: s["leaseEpoch"]
                for s in shards
                if s["subscription"] == own.name and s["running"] and s["leaseEpoch"] is not None
            }

        async def first_owns_all() -> dict[int, int] | None:
            owned = await claimed(first)
            return owned if set(owned) == {0, 1, 2, 3} else None

        claims = await async_wait_until(
            first_owns_all, 120, "one worker owning the 4 shards", retry_on=(httpx.HTTPError,)
        )
        await asyncio.to_thread(produce_groups, stack, name, range(400), GROUPS)
        workers.start(second, **env)

        async def split() -> bool:
            on_first, on_second = (
                await shards_running(first, own.name),
                await shards_running(second, own.name),
            )
            return bool(on_first) and bool(on_second) and on_first | on_second == {0, 1, 2, 3}

        await async_wait_until(
            split, 120, "the shards split between the workers", retry_on=(httpx.HTTPError,)
        )
        stayed = await claimed(first)
        assert claims is not None and stayed and all(stayed[shard] == claims[shard] for shard in stayed), (
            f"shards that stayed were restarted: before {claims}, after {stayed}"
        )
        await asyncio.to_thread(produce_groups, stack, name, range(400, 800), GROUPS)
        await async_wait_until(
            lambda: {s for v in endpoint.delivered.values() for s in v} >= set(range(800)),
            120,
            "every message delivered across the rebalance",
        )
    finally:
        registry.close()
