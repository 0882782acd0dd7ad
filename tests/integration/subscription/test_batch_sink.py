"""Batch endpoint kind on the real broker: a batch sink that fails some groups transiently and some
for good gets whole batches, and per-group order, completeness and DLQ blocking hold as on the
per-message path.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence

from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.kafka.broker import broker_for
from app.ordered.policy import OnDlq, RetryPolicy
from app.settings import Settings
from app.subscription import ops
from app.subscription.errors import EndpointRejected, EndpointUnavailable, NotAttempted
from app.subscription.model import EndpointSpec
from app.subscription.records import SubscriptionMessage
from app.subscription.registry import SubscriptionRegistry
from tests.integration.subscription.inprocess import running_shards, wait_until

GROUPS = 120
MESSAGES = 3600


class FlakySink:
    """Honours the batch contract: per group in order; after a group's failure, NotAttempted."""

    def __init__(self, transient: set[str], broken: set[int]) -> None:
        self.transient = transient
        self.broken = broken
        self.delivered: dict[str, list[int]] = defaultdict(list)
        self.attempts: dict[str, int] = defaultdict(int)
        self.batch_sizes: list[int] = []
        self.max_per_group_in_a_call = 0

    async def __call__(self, messages: Sequence[SubscriptionMessage]) -> list[BaseException | None]:
        self.batch_sizes.append(len(messages))
        per_group: dict[str, int] = defaultdict(int)
        failed: set[str] = set()
        out: list[BaseException | None] = []
        for m in messages:
            per_group[m.group_id] += 1
            if m.group_id in failed:
                out.append(NotAttempted("an earlier message of the group failed in this batch"))
                continue
            seq = int(m.payload.decode().split(":")[1])
            self.attempts[m.message_id] += 1
            if seq in self.broken:
                out.append(EndpointRejected(f"message {seq} is invalid"))
            elif m.group_id in self.transient and self.attempts[m.message_id] <= 2:
                out.append(EndpointUnavailable("store busy"))
            else:
                self.delivered[m.group_id].append(seq)
                out.append(None)
                continue
            failed.add(m.group_id)
        self.max_per_group_in_a_call = max(self.max_per_group_in_a_call, *per_group.values())
        await asyncio.sleep(0)
        return out


async def test_batch_sink_keeps_group_order_through_retries_and_dlq(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic = f"subb-{unique}"
    metadata.create(topic, 4)
    groups = [f"g{i}" for i in range(GROUPS)]
    produced: dict[str, list[int]] = {g: [] for g in groups}
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in range(MESSAGES):
            g = groups[seq % GROUPS]
            producer.produce(g, f"{g}:{seq}")
            produced[g].append(seq)
    transient = set(groups[:12])
    broken_groups = groups[20:23]
    broken = {produced[g][5] for g in broken_groups}
    sink = FlakySink(transient, broken)
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    sub = ops.create(
        registry,
        metadata,
        f"subb-{unique}",
        topic,
        EndpointSpec("batch", "flaky"),
        shard_count=2,
        retry=RetryPolicy(max_attempts=4, min_backoff_s=0.1, max_backoff_s=0.3),
    )
    settings = stack.model_copy(update={"subscription_batch_max": 500, "metadata_refresh_s": 1.0})
    expected_dlq = sum(len(produced[g]) - 5 for g in broken_groups)
    async with running_shards(settings, sub, metadata, batch_sink=sink) as runners:
        await wait_until(
            lambda: sum(map(len, sink.delivered.values())) >= MESSAGES - expected_dlq, 90, "deliveries"
        )
        await wait_until(lambda: sum(r.stats.dead_lettered for r in runners) >= expected_dlq, 30, "DLQ")
    dlq = await asyncio.to_thread(ops.dlq_list, stack, metadata, sub, None, None, None, None, 10_000)
    in_dlq = [int(e["payload"].split(":")[1]) for e in dlq]
    # nothing lost, nothing delivered twice, per-group produce order
    for g in groups:
        assert sink.delivered[g] == [s for s in produced[g] if s not in set(in_dlq)], g
    assert sorted(in_dlq) == sorted(s for g in broken_groups for s in produced[g][5:])
    # block_group: the broken message failed for good, its group's later messages followed it
    reasons = {(e["group_id"], e["reason"]) for e in dlq}
    assert reasons == {(g, "failed") for g in broken_groups} | {
        (g, "follows-blocked-group") for g in broken_groups
    }
    # transient groups were retried behind their failed message and delivered completely
    for g in transient:
        assert sink.delivered[g] == produced[g]
    # the sink got real batches with several messages of a group per call
    assert max(sink.batch_sizes) > 100
    assert sink.max_per_group_in_a_call > 1
    assert max(sink.batch_sizes) <= 500


async def test_batch_sink_skip_failed_delivers_the_rest_of_the_group(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    topic = f"subs-{unique}"
    metadata.create(topic, 2)
    groups = [f"g{i}" for i in range(10)]
    produced: dict[str, list[int]] = {g: [] for g in groups}
    with CompositeProducer(stack, topic, store=metadata) as producer:
        for seq in range(400):
            g = groups[seq % len(groups)]
            producer.produce(g, f"{g}:{seq}")
            produced[g].append(seq)
    broken = {produced["g3"][2], produced["g7"][10]}
    sink = FlakySink(set(), broken)
    registry = SubscriptionRegistry(
        broker_for(stack), f"__subs-{unique}", replication_factor=stack.kafka_replication_factor
    )
    sub = ops.create(
        registry,
        metadata,
        f"subs-{unique}",
        topic,
        EndpointSpec("batch", "flaky"),
        retry=RetryPolicy(max_attempts=1),
        on_dlq=OnDlq.SKIP_FAILED,
    )
    async with running_shards(stack, sub, metadata, batch_sink=sink):
        await wait_until(lambda: sum(map(len, sink.delivered.values())) >= 400 - 2, 60, "deliveries")
    for g in groups:
        assert sink.delivered[g] == [s for s in produced[g] if s not in broken], g
    dlq = await asyncio.to_thread(ops.dlq_list, stack, metadata, sub)
    assert sorted(int(e["payload"].split(":")[1]) for e in dlq) == sorted(broken)
