"""One `hubstream worker`: the read-only web views while two groups are blocked by DLQ'd messages,
then `dlq unsideline` (subscription stopped): the fixed group is replayed and delivered in order
ahead of its later messages; the still-broken group's replay goes back to DLQ once, no loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.ordered.policy import RetryPolicy
from app.settings import Settings
from app.subscription import ops
from app.subscription.model import EndpointSpec, Status
from app.subscription.registry import SubscriptionRegistry
from app.subscription.replay import ReplaySelection
from app.subscription.unsideline import unsideline
from tests.integration.subscription.conftest import Endpoint, Workers
from tests.support.waiting import async_wait_until


async def _until(check: Callable[[], Any], timeout_s: float, what: str) -> None:
    await async_wait_until(check, timeout_s, what, poll_s=0.5)


async def test_views_then_unsideline_replays_in_group_order(
    stack: Settings, metadata: MetadataStore, workers: Workers, endpoint: Endpoint, unique: str
) -> None:
    topic = f"subu-{unique}"
    metadata.create(topic, 2)
    groups = [f"g{i}" for i in range(10)]
    produced: dict[str, list[int]] = {g: [] for g in groups}
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in range(200):
            g = groups[seq % len(groups)]
            producer.produce(g, f"{g}:{seq}")
            produced[g].append(seq)
    fixed_group, broken_group = "g3", "g5"
    fixed_seq, broken_seq = produced[fixed_group][4], produced[broken_group][7]
    endpoint.broken = {str(fixed_seq), str(broken_seq)}
    registry = SubscriptionRegistry(
        broker_for(stack), workers.registry_topic, replication_factor=stack.kafka_replication_factor
    )
    sub = ops.create(
        registry,
        metadata,
        f"subu-{unique}",
        topic,
        EndpointSpec("http", endpoint.url, 5.0),
        retry=RetryPolicy(max_attempts=2, min_backoff_s=0.1, max_backoff_s=0.2),
        start=True,
    )
    port = 16900 + int(unique[:4], 16) % 900
    proc = workers.start(port)
    base = f"http://127.0.0.1:{port}/subscriptions"
    in_dlq_first = len(produced[fixed_group]) - 4 + len(produced[broken_group]) - 7

    async with aiohttp.ClientSession() as http:

        async def get(path: str) -> tuple[int, Any]:
            async with http.get(base + path) as resp:
                return resp.status, await resp.json()

        async def settled() -> bool:
            assert proc.poll() is None, "worker died; see its log in the test's tmp dir"
            try:
                status, body = await get(f"/{sub.name}/blocked")
            except aiohttp.ClientError:
                return False
            delivered = sum(map(len, endpoint.delivered.values()))
            if not (
                status == 200
                and body["blockedGroups"] == sorted([fixed_group, broken_group])
                and (delivered == 200 - in_dlq_first)
            ):
                return False
            # the blocked groups' followers are written to DLQ one after another, and the shard
            # commits what it settled after those writes: wait for the last of both
            status, lag = await get(f"/{sub.name}/lag")
            return bool(
                status == 200
                and lag["dlqDepth"] == in_dlq_first
                and [s["mqLag"] for s in lag["shards"]] == [0]
            )

        await _until(settled, 90, "both groups blocked, their followers in DLQ and the rest delivered")
        # views: shards here, a blocked group's state, a clean group, lag and DLQ depth, bad input
        status, shards = await get("/shards")
        assert status == 200 and [s["subscription"] for s in shards["shards"]] == [sub.name]
        assert shards["shards"][0]["blockedGroups"] == [fixed_group, broken_group]
        status, state = await get(f"/{sub.name}/groups/{fixed_group}")
        assert status == 200 and state["ownedHere"] and state["blocked"] and state["shard"] == 0
        assert state["state"]["dlq"]["p"] is not None and state["state"]["dlq"]["c"] is None
        status, clean = await get(f"/{sub.name}/groups/g0")
        assert status == 200 and clean["ownedHere"] and clean["state"] is None and not clean["blocked"]
        status, lag = await get(f"/{sub.name}/lag")
        assert status == 200 and lag["dlqDepth"] == in_dlq_first
        assert [s["mqLag"] for s in lag["shards"]] == [0]
        status, missing = await get("/nope-unknown/lag")
        assert status == 404 and missing["error"] == "UnknownSubscription"
        status, too_long = await get(f"/{sub.name}/groups/{'x' * (stack.max_group_id_bytes + 1)}")
        assert status == 400 and "longer than" in too_long["reason"]

        # stop; the view confirms the worker stopped the shard before the offline unsideline
        ops.set_status(registry, sub.name, Status.STOPPED)

        async def stopped() -> bool:
            body = (await get("/shards"))[1]
            return not body["shards"]

        await _until(stopped, 30, "the shard to stop")
        # the worker released the shard's lane as it stopped: nothing is left to fence
        assert await asyncio.to_thread(ops.wait_stopped, registry, sub.name, 5.0) == []
        endpoint.broken = {str(broken_seq)}  # the fixed group's endpoint problem is gone
        attempts_before = endpoint.seq_attempts[broken_seq]
        assert attempts_before == 1  # a 404 is not retried
        settings = stack.model_copy(update={"app_id": workers.app_id})
        everything = ReplaySelection()
        report = await asyncio.to_thread(unsideline, settings, registry, metadata, sub.name, everything)
        assert report["replayed"] == in_dlq_first
        ops.set_status(registry, sub.name, Status.RUNNING)

        async def fixed_delivered() -> bool:
            return endpoint.delivered[fixed_group] == produced[fixed_group]

        await _until(fixed_delivered, 60, "the fixed group's replay")
        # new messages of the fixed group are delivered after its replays
        with CompositeProducer(stack, topic, store=metadata) as producer:
            producer.produce(fixed_group, f"{fixed_group}:200")

        async def late_delivered() -> bool:
            return endpoint.delivered[fixed_group][-1:] == [200]

        await _until(late_delivered, 30, "a new message of the fixed group")
        dlq = await asyncio.to_thread(ops.dlq_list, settings, metadata, registry.get(sub.name), broken_group)
        reasons = [(int(str(e["payload"]).split(":")[1]), e["reason"]) for e in dlq]
        replay_failed = [seq for seq, reason in reasons if reason == "replay-failed"]
        assert replay_failed == [broken_seq]  # back in DLQ once, behind its first failure

        async def rq_drained() -> bool:
            status, lag = await get(f"/{sub.name}/lag")
            return status == 200 and all(s["rqLag"] == 0 for s in lag["shards"])

        # Nothing loops: once every retry copy was consumed (a replay sent round again would be
        # one), the broken message was tried exactly once more.
        await _until(rq_drained, 30, "the retry topic consumed to its end")
        assert endpoint.seq_attempts[broken_seq] == attempts_before + 1
    assert endpoint.delivered[broken_group] == produced[broken_group][:7]
    for g in groups:
        if g not in (fixed_group, broken_group):
            assert endpoint.delivered[g] == produced[g]
