"""Operations behind the CLI: create, describe, start/stop, delete, change-shards, offset reset
and lag (the DLQ's listing, depth and fast-forward: app.subscription.dlq). Synchronous
(confluent-kafka); run by `hubstream subscription …`.
"""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import TopicPartition

from app.composite.errors import UnknownCompositeTopic
from app.composite.store import MetadataStore
from app.crashpoints import crash_point
from app.kafka.admin import committed_offsets
from app.kafka.consuming import offset_client
from app.ordered.policy import OnDlq, RetryPolicy
from app.settings import Settings
from app.subscription.dlq import dlq_consumer_group, dlq_depth, dlq_list, forward_dlq, read_dlq
from app.subscription.errors import InternalTopicTaken, InvalidSubscription, SubscriptionExists
from app.subscription.model import EndpointSpec, Status, Subscription
from app.subscription.registry import SubscriptionRegistry
from app.subscription.shards import check_forward_only, check_shardable, plan_shard_change
from app.subscription.stopping import STOP_PATIENCE_S, wait_stopped

__all__ = [
    "Status",
    "change_shards",
    "create",
    "delete",
    "dlq_list",
    "lag_report",
    "queue_lag",
    "read_dlq",
    "reset_offset",
    "set_status",
    "wait_stopped",
]


def create(
    registry: SubscriptionRegistry,
    metadata: MetadataStore,
    name: str,
    topic: str,
    endpoint: EndpointSpec,
    shard_count: int = 1,
    retry: RetryPolicy | None = None,
    on_dlq: OnDlq = OnDlq.BLOCK_GROUP,
    start: bool = False,
) -> Subscription:
    if name in registry.refresh():
        raise SubscriptionExists(f"subscription {name!r} already exists")
    mq = metadata.get(topic)
    check_shardable(mq, shard_count)
    sub = Subscription(
        name,
        topic,
        endpoint,
        shard_count,
        retry or RetryPolicy(),
        on_dlq,
        Status.STOPPED,
        incarnation=uuid.uuid4().hex[:12],
    )
    # RQ/DLQ start with T0's partition count, so their routing stays shard-consistent with MQ.
    partitions = sub.internal_partitions(mq.storage_topics[0].partitions)
    for internal in (sub.rq_topic, sub.dlq_topic):
        _check_untaken(metadata, internal, partitions)
    metadata.create(sub.rq_topic, partitions, exist_ok=True)
    metadata.create(sub.dlq_topic, partitions, exist_ok=True)
    return registry.put(sub.bump(status=Status.RUNNING if start else Status.STOPPED))


def _check_untaken(metadata: MetadataStore, name: str, partitions: int) -> None:
    """An RQ/DLQ composite topic that exists already is taken over only as a create cut after
    writing it left it: one storage topic of the partitions it would get, without a record.
    Anything else (kept by `delete --keep-topics`, or a topic of the user's) holds records the new
    subscription would read as its own (its consumer group has no commits) and, on delete, delete."""
    try:
        topic = metadata.get(name)
    except UnknownCompositeTopic:
        return
    routing = [(s.partitions, s.k) for s in topic.storage_topics]
    if routing == [(partitions, 1)] and not any(metadata.broker.end_offsets(topic.partitions)):
        return
    raise InternalTopicTaken(
        f"composite topic {name!r} exists and holds records or another layout (kept by an earlier "
        "subscription of this name, or a topic of yours): a new subscription would take its "
        "records as its own; choose another subscription name"
    )


def set_status(registry: SubscriptionRegistry, name: str, status: Status) -> Subscription:
    """The operator's start or stop; it overrides a cut change-shards' intent to resume."""
    sub = registry.get(name)
    if sub.status is status and not sub.resume_after_change:
        return sub
    return registry.put(sub.bump(status=status, resume_after_change=False))


def delete(
    registry: SubscriptionRegistry,
    metadata: MetadataStore,
    name: str,
    *,
    keep_topics: bool = False,
    stop_wait_s: float = STOP_PATIENCE_S,
) -> None:
    """Stop the shards, delete the RQ and DLQ composite topics (unless `keep_topics`), then the
    definition. Cut anywhere, the definition is still there and running it again finishes the job
    (the definition used to go first: a cut left RQ/DLQ topics that no command could reach)."""
    sub = _stopped(registry, registry.get(name), stop_wait_s)  # no shard writes to RQ/DLQ while they go
    if not keep_topics:
        for topic in (sub.rq_topic, sub.dlq_topic):
            metadata.delete(topic, missing_ok=True)  # a cut run may have deleted it already
    registry.delete(name)


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    crash_point("subscription.ops.commit")
    consumer = offset_client(bootstrap, group)
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def lag_report(
    settings: Settings, registry: SubscriptionRegistry, metadata: MetadataStore, name: str
) -> dict[str, Any]:
    """Unconsumed MQ and RQ records per shard (`queue_lag`), and the DLQ depth: its parked records
    (neither replayed nor discarded; read from the DLQ and the group states of `settings`)."""
    out = queue_lag(registry, metadata, name)
    out["dlq_depth"] = dlq_depth(settings, metadata, registry.get(name))
    return out


def queue_lag(registry: SubscriptionRegistry, metadata: MetadataStore, name: str) -> dict[str, Any]:
    """Unconsumed MQ and RQ records per shard."""
    sub = registry.get(name)
    out: dict[str, Any] = {"subscription": name, "status": sub.status.value, "shard_count": sub.shard_count}
    shards: list[dict[str, int]] = [{"shard": s, "mq_lag": 0, "rq_lag": 0} for s in range(sub.shard_count)]
    for key, topic_name in (("mq_lag", sub.topic), ("rq_lag", sub.rq_topic)):
        topic = metadata.get(topic_name)
        tps = topic.partitions
        ends = metadata.broker.end_offsets(tps)
        committed = committed_offsets(metadata.bootstrap, sub.consumer_group, tps)
        for (storage_name, p), end, done in zip(tps, ends, committed, strict=True):
            storage = topic.storage_topics[topic.index_of(storage_name)]
            shard = p * sub.shard_count // storage.partitions
            shards[shard][key] += max(0, end - done)
    out["shards"] = shards
    return out


def _stopped(
    registry: SubscriptionRegistry, sub: Subscription, wait_s: float, **changes: Any
) -> Subscription:
    """A running subscription set stopped (with `changes`) once no worker can act for its shards
    (`wait_stopped`: released within `wait_s`, else fenced)."""
    if sub.status is not Status.RUNNING:
        return sub
    stopped = registry.put(sub.bump(status=Status.STOPPED, **changes))
    wait_stopped(registry, sub.name, wait_s)
    return stopped


def _mq_read_from(metadata: MetadataStore, sub: Subscription) -> int:
    """The first MQ storage topic the subscription has not fully consumed (committed offsets)."""
    topic = metadata.get(sub.topic)
    for idx, storage in enumerate(topic.storage_topics[: topic.produce_pointer]):
        tps = [(storage.name, p) for p in range(storage.partitions)]
        ends = metadata.broker.end_offsets(tps)
        if any(
            done < end
            for done, end in zip(
                committed_offsets(metadata.bootstrap, sub.consumer_group, tps), ends, strict=True
            )
        ):
            return idx
    return topic.produce_pointer


def change_shards(
    registry: SubscriptionRegistry,
    metadata: MetadataStore,
    name: str,
    shard_count: int,
    stop_wait_s: float = STOP_PATIENCE_S,
) -> Subscription:
    """ChangeShardCount: stop, add RQ/DLQ storage topics when needed and switch to them, re-shard, resume.

    GroupState moves when the new shards start: each loads its groups' newest states from the
    changelog of every slot.
    """
    sub = registry.get(name)
    was_running = sub.status is Status.RUNNING or sub.resume_after_change  # or a cut run stopped it
    mq, rq, dlq = metadata.get(sub.topic), metadata.get(sub.rq_topic), metadata.get(sub.dlq_topic)
    plan_shard_change(mq, rq, dlq, shard_count, _mq_read_from(metadata, sub))  # refuse early
    sub = _stopped(registry, sub, stop_wait_s, resume_after_change=True)  # shards commit as they stop
    try:
        # again once stopped: the shards may have finished an MQ storage topic meanwhile
        plan = plan_shard_change(mq, rq, dlq, shard_count, _mq_read_from(metadata, sub))
    except InvalidSubscription:
        if was_running:
            registry.put(sub.bump(status=Status.RUNNING, resume_after_change=False))
        raise
    for topic_name, partitions in (
        (sub.rq_topic, plan.new_rq_partitions),
        (sub.dlq_topic, plan.new_dlq_partitions),
    ):
        if partitions is not None:
            _produce_to_new_storage(metadata, topic_name, partitions, plan.k)
    status = Status.RUNNING if was_running else Status.STOPPED
    return registry.put(
        sub.bump(shard_count=shard_count, epoch=sub.epoch + 1, status=status, resume_after_change=False)
    )


def _produce_to_new_storage(metadata: MetadataStore, topic_name: str, partitions: int, k: int) -> None:
    """Add a storage topic of `partitions` and K `k` (an MQ storage topic's: it routes like it) and
    switch producing to it. A storage topic a cut run added and never switched to (still empty:
    nothing produces there) is switched to, not added again."""
    topic = metadata.get(topic_name)
    added_before = topic.produce_pointer < len(topic.storage_topics) - 1
    last = topic.storage_topics[-1]
    if not (added_before and (last.partitions, last.k) == (partitions, k)):
        topic = metadata.add_storage_topic(topic_name, partitions, k)
    while topic.produce_pointer < len(topic.storage_topics) - 1:
        topic = metadata.switch_produce(topic_name)


def reset_offset(
    registry: SubscriptionRegistry,
    metadata: MetadataStore,
    name: str,
    queue: str,
    storage_idx: int | None = None,
    offset: int | None = None,
    timestamp_ms: int | None = None,
    *,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """MQ: rewind or fast-forward to (storage topic, offset) or a timestamp. RQ/DLQ: forward only.
    A DLQ fast-forward gives up the dead letters below the new offsets (`forward_dlq`, which
    needs `settings` for the group states): they count as resolved, without replay."""
    sub = registry.get(name)
    if sub.status is Status.RUNNING:
        raise InvalidSubscription(f"stop subscription {name!r} before resetting offsets")
    wait_stopped(registry, name)
    if queue not in ("mq", "rq", "dlq"):
        raise InvalidSubscription("queue must be mq, rq or dlq")
    if (offset is None) == (timestamp_ms is None):
        raise InvalidSubscription("give either an offset (with a storage index) or a timestamp")
    if queue == "dlq" and settings is None:
        raise ValueError("a DLQ fast-forward writes group states: pass the settings")
    topic = metadata.get({"mq": sub.topic, "rq": sub.rq_topic, "dlq": sub.dlq_topic}[queue])
    group = sub.consumer_group if queue != "dlq" else dlq_consumer_group(sub)
    tps = topic.partitions
    ends = dict(zip(tps, metadata.broker.end_offsets(tps), strict=True))
    target: dict[tuple[str, int], int] = {}
    if offset is not None:
        idx = storage_idx or 0
        topic.storage(idx)
        for i, s in enumerate(topic.storage_topics):
            for p in range(s.partitions):
                tp = (s.name, p)
                target[tp] = ends[tp] if i < idx else (min(offset, ends[tp]) if i == idx else 0)
    else:
        consumer = offset_client(metadata.bootstrap, group)
        try:
            found = consumer.offsets_for_times(
                [TopicPartition(t, p, timestamp_ms or 0) for t, p in tps], timeout=10
            )
        finally:
            consumer.close()
        target = {
            (tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else ends[(tp.topic, tp.partition)])
            for tp in found
        }
    if queue != "mq":
        now = committed_offsets(metadata.bootstrap, group, tps)
        check_forward_only(queue, now, [target[tp] for tp in tps])
    done: dict[str, Any] = {}
    if queue == "dlq" and settings is not None:
        # the states first: a run cut before the commit is finished by running it again
        done["discarded"] = forward_dlq(settings, registry, metadata, sub, target)
    _commit(metadata.bootstrap, group, target)
    if queue == "mq":
        registry.put(sub.bump(epoch=sub.epoch + 1))  # a rewind re-delivers: forget "handled" marks
    offsets = {f"{t}[{p}]": o for (t, p), o in target.items()}
    return {"subscription": name, "queue": queue, "offsets": offsets, **done}
