"""Shards (the Varadhi design, "Subscription"): which partitions of which storage topics a shard owns,
which Faust table partition ("slot") holds its GroupState, ChangeShardCount planning and the
offset-reset rules. Pure functions over composite-topic values.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.composite.model import CompositeTopic, StorageTopic, check_partition_count
from app.composite.routing import group_hash, shard_of_partition, shard_partitions
from app.errors import InvalidInput
from app.subscription.errors import InvalidSubscription

__all__ = [
    "ShardAssignment",
    "ShardChangePlan",
    "assignments",
    "chain_keeps_shards",
    "check_forward_only",
    "check_shardable",
    "internal_partitions_for",
    "plan_shard_change",
    "shard_of_group",
    "slot_of",
]


@dataclass(frozen=True, slots=True)
class ShardAssignment:
    topic_name: str  # composite topic
    storage_topic_idx: int
    storage_topic: str
    assigned_partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShardChangePlan:
    shard_count: int
    new_rq_partitions: int | None  # a new RQ storage topic with this many partitions, or None
    new_dlq_partitions: int | None
    k: int = 1  # of the new RQ/DLQ storage topics: the MQ storage topic's they route like


def slot_of(subscription: str, shard_id: int, slots: int) -> int:
    """The GroupState table partition of a shard; spreads shard 0 of many subscriptions apart."""
    return (group_hash(subscription) + shard_id) % slots


def shard_of_group(group_id: str, storage: StorageTopic, shard_count: int) -> int:
    return shard_of_partition(storage.route(group_hash(group_id)), shard_count, storage.partitions)


def _one(
    topic: CompositeTopic, idx: int, storage: StorageTopic, shard_id: int, shard_count: int
) -> ShardAssignment:
    parts = tuple(shard_partitions(shard_id, shard_count, storage.partitions))
    return ShardAssignment(topic.name, idx, storage.name, parts)


def assignments(
    topic: CompositeTopic, shard_id: int, shard_count: int, from_idx: int = 0
) -> list[ShardAssignment]:
    """The shard's contiguous partition range in every storage topic from `from_idx` on."""
    if not 0 <= shard_id < shard_count:
        raise InvalidSubscription(f"shard {shard_id} outside 0..{shard_count - 1}")
    return [
        _one(topic, i, s, shard_id, shard_count) for i, s in enumerate(topic.storage_topics) if i >= from_idx
    ]


def check_shardable(
    topic: CompositeTopic, shard_count: int, from_idx: int = 0, upto_idx: int | None = None
) -> None:
    """Every storage topic still to be read must split evenly and keep groups in their shard.

    A topic routes a group by `route`: partition K*(h mod B) + (h div P) mod K, with base
    B = P/K. With S shards of P/S partitions each, the shard is (h mod B) div (B/S) when S divides
    B: the same in every topic of one base. So across the topics read, groups keep their shard
    when S is 1, or every topic routes alike (same P and K), or all share one base that S divides.
    (S dividing each P is not enough: 4 -> 12 -> 24 partitions with 3 shards moves groups.)
    tests/unit/subscription/test_shards.py checks this rule against brute force for every pair
    of storage topics up to 24 partitions.
    """
    topics = topic.storage_topics[from_idx : None if upto_idx is None else upto_idx + 1]
    for storage in topics:
        if storage.partitions % shard_count:
            raise InvalidSubscription(
                f"shard count {shard_count} does not divide the {storage.partitions} partitions of "
                f"{storage.name}: choose a shard count that divides it"
            )
    if shard_count == 1 or len({(t.partitions, t.k) for t in topics}) <= 1:
        return
    first = topics[0]
    for storage in topics:
        base = storage.partitions // storage.k
        if base != first.partitions // first.k:
            raise InvalidSubscription(
                f"{storage.name} ({storage.partitions} partitions, K={storage.k}) does not scale from "
                f"{first.name} ({first.partitions} partitions, K={first.k}): groups change shards there; "
                "change the shard count to 1 or drain the topics before it first"
            )
        if base % shard_count:
            raise InvalidSubscription(
                f"shard count {shard_count} does not divide the base partition count {base} of "
                f"{storage.name} (partitions / K): groups change shards between its storage topics; "
                "choose a shard count that divides it"
            )


def internal_partitions_for(current: int, shard_count: int) -> int:
    """The smallest allowed partition count >= current that shard_count divides."""
    n = shard_count * max(1, -(-current // shard_count))
    while True:
        try:
            return check_partition_count(n)
        except InvalidInput:
            n += shard_count


def plan_shard_change(
    mq: CompositeTopic, rq: CompositeTopic, dlq: CompositeTopic, new_shard_count: int, mq_from_idx: int = 0
) -> ShardChangePlan:
    """ChangeShardCount steps 1-2: which RQ/DLQ storage topics must be added for the new count."""
    if new_shard_count < 1:
        raise InvalidSubscription("shard count must be >= 1")
    check_shardable(mq, new_shard_count, mq_from_idx)
    target = mq.storage_topics[mq_from_idx]

    def routes_like_mq(internal: StorageTopic) -> bool:
        # A topic routes by its partition count and K together: an RQ/DLQ storage topic with an MQ
        # storage topic's (P, K) routes every group like it, and a chain from there to the MQ topic
        # being read keeps groups in their shard. (The same P with another K does not.)
        for j in range(mq_from_idx, -1, -1):
            main = mq.storage_topics[j]
            if (main.partitions, main.k) == (internal.partitions, internal.k):
                return chain_keeps_shards(mq, new_shard_count, j, mq_from_idx)
        return False

    def need(topic: CompositeTopic) -> int | None:
        return None if routes_like_mq(topic.current) else target.partitions

    return ShardChangePlan(new_shard_count, need(rq), need(dlq), target.k)


def chain_keeps_shards(topic: CompositeTopic, shard_count: int, from_idx: int, upto_idx: int) -> bool:
    """Do groups keep their shard from storage topic `from_idx` through `upto_idx`?"""
    try:
        check_shardable(topic, shard_count, from_idx, upto_idx)
    except InvalidSubscription:
        return False
    return True


def check_forward_only(queue: str, committed: list[int], target: list[int]) -> None:
    """RQ/DLQ offsets may only move forward (the seed: no rewind of internal queues)."""
    for partition, (now, to) in enumerate(zip(committed, target, strict=True)):
        if to < now:
            raise InvalidSubscription(
                f"{queue}: partition {partition} offset {to} is behind the committed {now}; "
                "RQ/DLQ can only be fast-forwarded"
            )
