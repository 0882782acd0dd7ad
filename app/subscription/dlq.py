"""The subscription's dead-letter queue read offline: each record with its status, the DLQ depth
(parked records only) and the DLQ fast-forward of `reset-offset --queue dlq`.

A dead letter of group g at DLQ position p (storage topic index, offset) is resolved once g's DLQ
consumed mark (`dlq.c` in its GroupState) is at or past p: `replayed` when `dlq unsideline` moved
the mark over it, `discarded` when a fast-forward did (the state keeps those ranges,
`GroupState.dlq_discarded`), else `parked`. A record of no group (undecodable) has no state: it is
discarded once a fast-forward committed the DLQ consumer group past it.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from typing import Any

from app.composite.model import CompositeTopic
from app.composite.routing import group_hash
from app.composite.store import MetadataStore
from app.kafka.admin import committed_offsets
from app.kafka.reading import read_from
from app.ordered.errors import UndecodableMessage
from app.ordered.records import decode_internal
from app.ordered.rules import DlqStatus, GroupState, MessageState, dlq_status, on_dlq_discarded
from app.settings import Settings
from app.subscription.delivery import UNDECODABLE_GROUP
from app.subscription.errors import InvalidSubscription
from app.subscription.model import Subscription
from app.subscription.offline import StoredStates, read_states, write_states
from app.subscription.registry import SubscriptionRegistry
from app.subscription.replay import DlqEntry, select_discards

__all__ = [
    "STATUSES",
    "DlqStatuses",
    "dlq_consumer_group",
    "dlq_depth",
    "dlq_entry_of",
    "dlq_list",
    "forward_dlq",
    "read_dlq",
]

STATUSES = ("all", *(s.value for s in DlqStatus))


def dlq_consumer_group(sub: Subscription) -> str:
    """The consumer group a DLQ fast-forward commits (what it gave up of records of no group)."""
    return f"{sub.consumer_group}-dlq"


def read_dlq(metadata: MetadataStore, sub: Subscription, group_id: str | None, limit: int) -> list[Any]:
    """Raw DLQ records (confluent-kafka messages), of one group's partitions when `group_id` is given."""
    topic = metadata.get(sub.dlq_topic)
    tps: list[tuple[str, int]] = []
    for s in topic.storage_topics:
        parts = [s.route(group_hash(group_id))] if group_id else list(range(s.partitions))
        tps += [(s.name, p) for p in parts]
    out: list[Any] = []
    with closing(read_from(metadata.broker, dict.fromkeys(tps, 0), timeout_s=120.0)) as records:
        for msg in records:
            if group_id and (msg.key() or b"").decode("utf-8", "replace") != group_id:
                continue
            out.append(msg)
            if len(out) >= limit:
                break
    return out


def dlq_entry_of(msg: Any, dlq: CompositeTopic) -> DlqEntry | None:
    """The group's dead letter a DLQ record is, or None for a record of no group (undecodable)."""
    group = (msg.key() or b"").decode("utf-8", "replace")
    if group == UNDECODABLE_GROUP:
        return None
    try:
        meta = decode_internal(msg.headers())
    except UndecodableMessage:
        return None
    failed_ms = meta.failure.failed_ms if meta.failure is not None else 0
    at = (dlq.index_of(msg.topic()), msg.offset())
    return DlqEntry(group, meta.message_id, meta.main, meta.main_partition, at, failed_ms)


@dataclass(frozen=True, slots=True)
class DlqStatuses:
    """What decides a DLQ record's status: the groups' states, and for records of no group the
    DLQ consumer group's committed offsets."""

    dlq: CompositeTopic
    states: dict[str, GroupState]
    committed: dict[tuple[str, int], int]

    @classmethod
    def read(cls, settings: Settings, metadata: MetadataStore, sub: Subscription) -> DlqStatuses:
        dlq = metadata.get(sub.dlq_topic)
        tps = dlq.partitions
        committed = dict(
            zip(tps, committed_offsets(metadata.bootstrap, dlq_consumer_group(sub), tps), strict=True)
        )
        return cls(dlq, read_states(settings, sub).states, committed)

    def of(self, msg: Any) -> DlqStatus:
        entry = dlq_entry_of(msg, self.dlq)
        if entry is not None:
            return dlq_status(self.states.get(entry.group_id), entry.dlq)
        if msg.offset() < self.committed.get((msg.topic(), msg.partition()), 0):
            return DlqStatus.DISCARDED
        return DlqStatus.PARKED


def dlq_depth(settings: Settings, metadata: MetadataStore, sub: Subscription) -> int:
    """Parked DLQ records: those written and neither replayed nor discarded."""
    dlq = metadata.get(sub.dlq_topic)
    if not any(metadata.broker.end_offsets(dlq.partitions)):
        return 0  # nothing was ever dead-lettered: no need to read states
    statuses = DlqStatuses.read(settings, metadata, sub)
    return sum(statuses.of(msg) is DlqStatus.PARKED for msg in read_dlq(metadata, sub, None, 10_000_000))


def dlq_list(
    settings: Settings,
    metadata: MetadataStore,
    sub: Subscription,
    group_id: str | None = None,
    message_id: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    limit: int = 1000,
    status: str = "all",
) -> list[dict[str, Any]]:
    """DLQ records with their status and failure reason, filtered by group, message id, failure
    time or status (`parked`, `replayed`, `discarded` or `all`)."""
    if status not in STATUSES:
        raise InvalidSubscription(f"status must be one of {', '.join(STATUSES)}")
    statuses = DlqStatuses.read(settings, metadata, sub)
    out: list[dict[str, Any]] = []
    for msg in read_dlq(metadata, sub, group_id, 10 * limit + 10_000):
        entry = _dlq_entry(msg)
        entry["status"] = statuses.of(msg).value
        if status != "all" and entry["status"] != status:
            continue
        if message_id and entry["message_id"] != message_id:
            continue
        failed = entry.get("failed_ms") or 0
        if (since_ms and failed < since_ms) or (until_ms and failed > until_ms):
            continue
        out.append(entry)
    return sorted(out, key=lambda e: (e["group_id"], e["main"]))[:limit]


def forward_dlq(
    settings: Settings,
    registry: SubscriptionRegistry,
    metadata: MetadataStore,
    sub: Subscription,
    target: dict[tuple[str, int], int],
) -> int:
    """Give up the dead letters below the DLQ offsets `target` (without replay): each group's DLQ
    consumed mark moves to its last one (`on_dlq_discarded`), so a block_group group whose dead
    letters are all resolved is no longer blocked. The states are written as unsideline writes
    them (subscription stopped); the caller commits `target` afterwards. The number given up."""
    stored: StoredStates = read_states(settings, sub)
    dlq = metadata.get(sub.dlq_topic)
    entries: list[DlqEntry] = []
    below: set[tuple[str, tuple[int, int]]] = set()
    for msg in read_dlq(metadata, sub, None, 10_000_000):
        entry = dlq_entry_of(msg, dlq)
        if entry is None:
            continue
        entries.append(entry)
        if msg.offset() < target.get((msg.topic(), msg.partition()), 0):
            below.add((entry.group_id, entry.dlq))
    plan = select_discards(entries, stored.states, lambda e: (e.group_id, e.dlq) in below)
    new = {
        group: on_dlq_discarded(
            stored.states.get(group) or GroupState(generation=sub.epoch),
            MessageState.at(given_up[-1].main, given_up[-1].dlq),
        )
        for group, given_up in plan.items()
    }
    write_states(settings, registry, metadata, sub, stored, new, point="subscription.reset_offset.dlq_states")
    return sum(map(len, plan.values()))


def _dlq_entry(msg: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "group_id": (msg.key() or b"").decode("utf-8", "replace"),
        "dlq": f"{msg.topic()}[{msg.partition()}]@{msg.offset()}",
        "payload": (msg.value() or b"")[:512].decode("utf-8", "replace"),
    }
    try:
        meta = decode_internal(msg.headers())
    except UndecodableMessage as exc:
        entry.update({"message_id": None, "main": [-1, -1], "reason": "undecodable", "error": str(exc)})
        return entry
    entry.update(
        {"message_id": meta.message_id, "main": list(meta.main), "failed_attempts": meta.failed_attempts}
    )
    if meta.failure is not None:
        f = meta.failure
        entry.update(
            {
                "reason": f.reason,
                "error_class": f.error_class,
                "error": f.error,
                "source": f.source,
                "failed_ms": f.failed_ms,
            }
        )
    return entry
