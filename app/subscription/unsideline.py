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

from app.composite.producer import AsyncCompositeProducer
from app.composite.store import MetadataStore
from app.crashpoints import crash_point
from app.ordered.records import InternalMeta, encode_internal
from app.ordered.rules import GroupState, MessageState, on_unsidelined
from app.settings import Settings
from app.subscription.dlq import dlq_entry_of, read_dlq
from app.subscription.errors import SubscriptionNotStopped
from app.subscription.model import Status, Subscription
from app.subscription.offline import read_states, write_states
from app.subscription.registry import SubscriptionRegistry
from app.subscription.replay import DlqEntry, ReplaySelection, select_replays
from app.subscription.stopping import wait_stopped

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
    wait_stopped(registry, name)
    stored = read_states(settings, sub)
    dlq_topic = metadata.get(sub.dlq_topic)
    records: dict[tuple[str, int, int], Any] = {}
    entries: list[DlqEntry] = []
    for msg in read_dlq(metadata, sub, selection.group_id, 10_000_000):
        entry = dlq_entry_of(msg, dlq_topic)
        if entry is not None:
            entries.append(entry)
            records[(entry.group_id, *entry.dlq)] = msg
    plan = select_replays(entries, stored.states, selection)
    written = asyncio.run(_replay(settings, metadata, sub, plan, records))
    new: dict[str, GroupState] = {}
    for group, picked in plan.items():
        last = picked[-1]
        new[group] = on_unsidelined(
            stored.states.get(group) or GroupState(generation=sub.epoch),
            MessageState.at(last.main, last.dlq),
            written[group],
        )
    # replays in RQ, the states do not say so yet
    write_states(settings, registry, metadata, sub, stored, new, point="subscription.unsideline.states")
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
