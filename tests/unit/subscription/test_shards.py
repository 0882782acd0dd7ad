"""Shard assignment, shard-consistent group placement, ChangeShardCount planning, reset rules."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.composite.model import CompositeTopic, StorageTopic
from app.composite.routing import group_hash, shard_of_partition
from app.ordered.errors import InvalidPolicy
from app.ordered.policy import RetryPolicy
from app.subscription.errors import InvalidSubscription
from app.subscription.model import EndpointSpec, Subscription
from app.subscription.shards import (
    assignments,
    chain_keeps_shards,
    check_forward_only,
    check_shardable,
    internal_partitions_for,
    plan_shard_change,
    shard_of_group,
    slot_of,
)


def test_assignments_cover_every_partition_once() -> None:
    topic = CompositeTopic.create("t", 12).add_storage_topic(24)
    for count in (1, 2, 3, 4, 6, 12):
        for idx, storage in enumerate(topic.storage_topics):
            owned = [p for s in range(count) for p in assignments(topic, s, count)[idx].assigned_partitions]
            assert sorted(owned) == list(range(storage.partitions))


@settings(max_examples=200, deadline=None)
@given(
    st.text(min_size=1, max_size=20),
    st.sampled_from([(4, 2), (4, 4), (12, 3), (6, 6), (12, 4)]),
    st.integers(1, 4),
)
def test_group_stays_in_its_shard_across_storage_topics(
    group: str, sizes: tuple[int, int], factor: int
) -> None:
    base, count = sizes
    topic = (
        CompositeTopic.create("t", base).add_storage_topic(base * factor).add_storage_topic(base * factor * 2)
    )
    check_shardable(topic, count)
    shards = {shard_of_group(group, s, count) for s in topic.storage_topics}
    assert len(shards) == 1
    partition = topic.storage_topics[1].route(group_hash(group))
    assert partition in assignments(topic, shards.pop(), count)[1].assigned_partitions


def test_k1_topic_with_other_partition_count_is_not_shardable() -> None:
    topic = CompositeTopic.create("t", 4).add_storage_topic(6)
    assert topic.storage_topics[1].k == 1
    with pytest.raises(InvalidSubscription):
        check_shardable(topic, 2)
    check_shardable(topic, 1)
    check_shardable(topic, 2, from_idx=1)


def test_plan_adds_internal_topics_only_when_needed() -> None:
    mq = CompositeTopic.create("m", 12)
    rq, dlq = CompositeTopic.create("r", 12), CompositeTopic.create("d", 12)
    # RQ/DLQ route like MQ (same partition count): any count dividing them keeps groups in place
    for count in (1, 2, 3, 4, 6, 12):
        plan = plan_shard_change(mq, rq, dlq, count)
        assert plan.new_rq_partitions is None and plan.new_dlq_partitions is None
    # RQ/DLQ that do not route like MQ get a storage topic that does
    legacy_rq, legacy_dlq = CompositeTopic.create("r", 4), CompositeTopic.create("d", 4)
    plan = plan_shard_change(mq, legacy_rq, legacy_dlq, 3)
    assert plan.new_rq_partitions == plan.new_dlq_partitions == 12
    assert internal_partitions_for(4, 12) == 12
    with pytest.raises(InvalidSubscription):
        plan_shard_change(mq, rq, dlq, 5)


def test_main_topic_partition_change_needs_new_internal_topics() -> None:
    mq = CompositeTopic.create("m", 4).add_storage_topic(6)  # K=1: groups move between T0 and T1
    rq, dlq = CompositeTopic.create("r", 4), CompositeTopic.create("d", 4)
    with pytest.raises(InvalidSubscription):
        plan_shard_change(mq, rq, dlq, 2)  # T0 still being read: 2 shards cannot span T0 -> T1
    plan = plan_shard_change(mq, rq, dlq, 2, mq_from_idx=1)  # T0 drained
    assert plan.new_rq_partitions == plan.new_dlq_partitions == 6
    assert not chain_keeps_shards(mq, 2, 0, 1) and chain_keeps_shards(mq, 1, 0, 1)
    doubled = CompositeTopic.create("m", 4).add_storage_topic(8)  # K=2 keeps groups in their shard
    assert chain_keeps_shards(doubled, 4, 0, 1)
    assert plan_shard_change(doubled, rq, dlq, 4, mq_from_idx=1).new_rq_partitions is None


def test_slots_and_forward_only() -> None:
    assert {slot_of("s", i, 12) for i in range(12)} == set(range(12))
    check_forward_only("rq", [1, 2], [1, 5])
    with pytest.raises(InvalidSubscription):
        check_forward_only("rq", [3, 2], [1, 5])


def test_subscription_validation_and_json() -> None:
    sub = Subscription(
        "s1", "t", EndpointSpec("http", "http://x/y"), shard_count=2, retry=RetryPolicy(max_attempts=5)
    )
    assert Subscription.from_json(sub.to_json()) == sub
    assert sub.internal_partitions(None) == 2
    with pytest.raises(InvalidSubscription):
        sub.internal_partitions(3)
    with pytest.raises(InvalidSubscription):
        EndpointSpec("http", "ftp://x")
    with pytest.raises(InvalidSubscription):
        Subscription("bad name", "t", EndpointSpec("callable", "noop"))
    with pytest.raises(InvalidPolicy):
        RetryPolicy(max_attempts=0)


def _shards(storage: StorageTopic, shard_count: int, period: int) -> list[int]:
    return [shard_of_partition(storage.route(h), shard_count, storage.partitions) for h in range(period)]


def test_the_rule_matches_brute_force_for_every_chain_up_to_24_partitions() -> None:
    """Every chain of up to three storage topics (each of an allowed 1-24 partitions, K as the composite
    topic sets it), every range of two or more of them read by a subscription, every shard count
    dividing their partition counts: `check_shardable` accepts exactly when every group hash keeps
    its shard across the range (compared over a whole period of both routings)."""
    keeps: dict[tuple[int, int, int, int, int], bool] = {}

    def same_shards(a: StorageTopic, b: StorageTopic, count: int) -> bool:
        key = (a.partitions, a.k, b.partitions, b.k, count)
        if key not in keeps:
            period = math.lcm(a.partitions * a.k, b.partitions * b.k)
            fa, fb = _shards(a, count, a.partitions * a.k), _shards(b, count, b.partitions * b.k)
            keeps[key] = all(fa[h % len(fa)] == fb[h % len(fb)] for h in range(period))
        return keeps[key]

    allowed = [n for n in range(1, 25) if n in (1, 2, 3) or n % 4 == 0 or n % 6 == 0]
    cases = moving = 0
    for first, *later in itertools.product(allowed, repeat=3):
        topic = CompositeTopic.create("t", first)
        for size, _ in zip(later, range(2), strict=False):
            topic = topic.add_storage_topic(size)
        chain = topic.storage_topics
        for lo, hi in ((0, 1), (1, 2), (0, 2)):
            sizes = [t.partitions for t in chain[lo : hi + 1]]
            for count in range(1, min(sizes) + 1):
                if any(size % count for size in sizes):
                    continue
                truth = all(same_shards(chain[lo], t, count) for t in chain[lo + 1 : hi + 1])
                assert chain_keeps_shards(topic, count, lo, hi) == truth, (chain[lo : hi + 1], count, truth)
                cases += 1
                moving += not truth
    print(f"{cases} (chain range, shard count) cases up to 24 partitions, {moving} move groups: all refused")
    assert moving > 0


def test_scaling_4_12_24_with_3_shards_is_refused_from_the_second_topic() -> None:
    """3 divides 12 and 24, but not their base 4: groups would change shard between them."""
    topic = CompositeTopic.create("t", 4).add_storage_topic(12).add_storage_topic(24)
    assert [t.k for t in topic.storage_topics] == [1, 3, 6]
    with pytest.raises(InvalidSubscription, match="base partition count 4"):
        check_shardable(topic, 3, from_idx=1)
    check_shardable(topic, 2)  # 2 divides the base: every group keeps its shard


def _applied(internal: CompositeTopic, partitions: int | None, k: int) -> CompositeTopic:
    """The RQ/DLQ composite topic after change-shards applied its plan."""
    return internal if partitions is None else internal.add_storage_topic(partitions, k).switch_produce()


GROUPS = [f"g{i}" for i in range(200)]


@pytest.mark.parametrize(
    ("mq", "rq_partitions", "shards"),
    [
        (CompositeTopic.create("m", 3).add_storage_topic(4).add_storage_topic(8), 3, 2),  # K 1, 1, 2
        (CompositeTopic.create("m", 4).add_storage_topic(2).add_storage_topic(4), 4, 2),  # K 1, 1, 2
    ],
)
def test_new_retry_topics_route_like_the_main_topic_with_its_k(
    mq: CompositeTopic, rq_partitions: int, shards: int
) -> None:
    """An RQ storage topic with the MQ topic's partition count but another K routes groups
    elsewhere: about half of them had their retries owned by another shard than their messages."""
    rq = CompositeTopic.create("r", rq_partitions)
    last = len(mq.storage_topics) - 1
    plan = plan_shard_change(mq, rq, rq, shards, mq_from_idx=last)
    assert plan.new_rq_partitions is not None
    rq = _applied(rq, plan.new_rq_partitions, plan.k)
    main = mq.storage_topics[last]
    moved = [g for g in GROUPS if shard_of_group(g, main, shards) != shard_of_group(g, rq.current, shards)]
    assert not moved, f"{len(moved)} of {len(GROUPS)} groups' retries go to another shard"


def test_every_plan_keeps_retries_in_their_groups_shard_for_small_chains() -> None:
    """Every MQ chain of up to three storage topics of 1-8 partitions (K by the seed's rule), every
    RQ topic of those counts, every shard count 1-4 that the chain allows: once the plan is applied,
    each group's RQ partition is in the shard of its MQ partition in every MQ topic still read."""
    counts = (1, 2, 3, 4, 6, 8)
    checked = 0
    for length in (1, 2, 3):
        for chain in itertools.product(counts, repeat=length):
            mq = CompositeTopic.create("m", chain[0])
            for p in chain[1:]:
                mq = mq.add_storage_topic(p)
            for rq_partitions, shards in itertools.product(counts, (1, 2, 3, 4)):
                rq = CompositeTopic.create("r", rq_partitions)
                from_idx = length - 1
                try:
                    plan = plan_shard_change(mq, rq, rq, shards, mq_from_idx=from_idx)
                except InvalidSubscription:
                    continue
                rq = _applied(rq, plan.new_rq_partitions, plan.k)
                for main in mq.storage_topics[from_idx:]:
                    for g in GROUPS[:50]:
                        assert shard_of_group(g, main, shards) == shard_of_group(g, rq.current, shards), (
                            chain,
                            rq_partitions,
                            shards,
                        )
                checked += 1
    assert checked > 500
