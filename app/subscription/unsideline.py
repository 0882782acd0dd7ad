"""`subscription dlq unsideline`: replay selected DLQ messages through RQ, in group order.

Runs while the subscription is stopped, so that no shard owns the groups' states meanwhile:
it copies the selected DLQ records into RQ (marked `hs-replay`, attempts reset), then writes each
group's new GroupState (`on_unsidelined`: DLQ consumed up to the last replayed entry, RQ produced
up to the last copy) to the state changelog in the group's slot partition, and bumps the epoch
so shards reload states when they start. When the subscription runs again, shards deliver the
replays before later messages of the group; a replay that fails goes back to DLQ once
(reason `replay-failed`), and the rest of a `block_group` group follows it there.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from confluent_kafka import Producer

from app.composite.producer import AsyncCompositeProducer
from app.composite.store import MetadataStore
from app.crashpoints import crash_point
from app.errors import ServiceUnavailable
from app.kafka.broker import broker_for
from app.ordered.errors import UndecodableMessage
from app.ordered.records import InternalMeta, decode_internal, encode_internal
from app.ordered.rules import GroupState, MessageState, on_unsidelined
from app.settings import Settings
from app.subscription.delivery import UNDECODABLE_GROUP
from app.subscription.errors import SubscriptionNotStopped
from app.subscription.model import Status, Subscription
from app.subscription.ops import read_dlq, wait_stopped
from app.subscription.registry import SubscriptionRegistry
from app.subscription.replay import DlqEntry, ReplaySelection, select_replays
from app.subscription.shards import shard_of_group, slot_of
from app.subscription.statelog import changelog_topic, scan_states, state_key

__all__ = ["unsideline"]


def unsideline(
    settings: Settings,
    registry: SubscriptionRegistry,
    metadata: MetadataStore,
    name: str,
    selection: ReplaySelection,
) -> dict[str, Any]:
    sub = registry.get(name)
    if sub.status is Status.RUNNING:
        raise SubscriptionNotStopped(
            f"stop subscription {name!r} before unsidelining (hubstream subscription stop {name})"
        )
    wait_stopped(registry, name, 30.0)
    changelog = changelog_topic(settings.app_id)
    latest = scan_states(broker_for(settings), changelog, settings.subscription_shard_slots, sub.state_scope)
    states = {g: GroupState.from_json(v["s"]) for g, (_e, _slot, v) in latest.items()}
    dlq_topic = metadata.get(sub.dlq_topic)
    records: dict[tuple[str, int, int], Any] = {}
    entries: list[DlqEntry] = []
    for msg in read_dlq(metadata, sub, selection.group_id, 10_000_000):
        group = (msg.key() or b"").decode("utf-8", "replace")
        if group == UNDECODABLE_GROUP:
            continue
        try:
            meta = decode_internal(msg.headers())
        except UndecodableMessage:
            continue
        dlq_pos = (dlq_topic.index_of(msg.topic()), msg.offset())
        failed_ms = meta.failure.failed_ms if meta.failure is not None else 0
        entries.append(DlqEntry(group, meta.message_id, meta.main, meta.main_partition, dlq_pos, failed_ms))
        records[(group, *dlq_pos)] = msg
    plan = select_replays(entries, states, selection)
    written = asyncio.run(_replay(settings, metadata, sub, plan, records))
    mq = metadata.get(sub.topic).current
    producer = Producer({"bootstrap.servers": settings.bootstrap, "enable.idempotence": True})
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    crash_point("subscription.unsideline.states")  # replays in RQ, the states do not say so yet
    for group, picked in plan.items():
        last = picked[-1]
        new = on_unsidelined(
            states.get(group) or GroupState(generation=sub.epoch),
            MessageState.at(last.main, last.dlq),
            written[group],
        )
        known = latest.get(group)
        slot = (
            known[1]
            if known is not None
            else slot_of(name, shard_of_group(group, mq, sub.shard_count), settings.subscription_shard_slots)
        )
        value = orjson.dumps({"e": sub.epoch, "s": new.to_json()})
        key = state_key(sub.state_scope, group)
        producer.produce(changelog, key=key, value=value, partition=slot, on_delivery=on_delivery)
    left = producer.flush(30)
    if errors or left:
        reason = errors[0] if errors else f"{left} records not confirmed in 30 s"
        raise ServiceUnavailable(f"{changelog}: state write failed: {reason}")
    if plan:
        registry.put(sub.bump(epoch=sub.epoch + 1))  # shards re-read the states when they start
    return {
        "subscription": name,
        "replayed": sum(len(p) for p in plan.values()),
        "groups": {g: [e.message_id for e in p] for g, p in sorted(plan.items())},
    }


async def _replay(
    settings: Settings,
    metadata: MetadataStore,
    sub: Subscription,
    plan: dict[str, list[DlqEntry]],
    records: dict[tuple[str, int, int], Any],
) -> dict[str, list[MessageState]]:
    """Copy the picked records into RQ in group order; where each copy was written, per group."""
    # its own store: closing the producer closes the store it was given
    out = AsyncCompositeProducer(
        settings,
        sub.rq_topic,
        store=MetadataStore(metadata.broker, metadata.topic, replication_factor=metadata.replication_factor),
        copies=True,
    )
    rq = metadata.get(sub.rq_topic)
    written: dict[str, list[MessageState]] = {}
    try:
        for group, picked in plan.items():
            for entry in picked:
                msg = records[(group, *entry.dlq)]
                meta = InternalMeta(entry.main, entry.main_partition, entry.message_id, 0, 0, replay=True)
                headers = encode_internal(meta, msg.headers())
                crash_point("subscription.unsideline.rq_copy")
                delivered = await out.produce(group, msg.value() or b"", headers=dict(headers))
                at = MessageState.at(entry.main, (rq.index_of(delivered.topic), delivered.offset))
                written.setdefault(group, []).append(at)
    finally:
        await out.close()
    return written
