"""What the main job reads back from Kafka to report a run: storage-topic ends, what the
subscription consumed, its retry and dead-letter records with their reasons, and completion
events. Counts come from the broker, never from a worker's in-process counters."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from app.composite.store import MetadataStore
from app.kafka.admin import committed_offsets
from app.kafka.broker import BrokerPort, broker_for
from app.kafka.reading import read_from, read_to_end
from app.ordered.errors import UndecodableMessage
from app.ordered.records import decode_internal
from app.settings import Settings
from app.subscription.registry import SubscriptionRegistry

__all__ = [
    "Offsets",
    "SubscriptionTopics",
    "completions_seen",
    "consumed",
    "copy_reasons",
    "ends",
    "partitions",
    "since",
    "subscription_topics",
]

Offsets = dict[tuple[str, int], int]


@dataclass(frozen=True, slots=True)
class SubscriptionTopics:
    consumer_group: str
    main: str
    retry: str
    dead_letter: str


def subscription_topics(settings: Settings, name: str) -> SubscriptionTopics:
    registry = SubscriptionRegistry.of(settings)
    try:
        registry.refresh()
        sub = registry.get(name)
    finally:
        registry.close()
    return SubscriptionTopics(sub.consumer_group, sub.topic, sub.rq_topic, sub.dlq_topic)


def partitions(settings: Settings, composite: str) -> list[tuple[str, int]]:
    """Every (storage topic, partition) of composite topic `composite`, read once from its metadata."""
    metadata = MetadataStore.of(settings)
    try:
        return metadata.get(composite).partitions
    finally:
        metadata.close()


def ends(broker: BrokerPort, tps: list[tuple[str, int]]) -> Offsets:
    """The end offset of each partition."""
    return dict(zip(tps, broker.end_offsets(tps), strict=True))


def consumed(bootstrap: str, group: str, tps: list[tuple[str, int]]) -> Offsets:
    """The consumer group's committed offset of each partition."""
    return dict(zip(tps, committed_offsets(bootstrap, group, tps), strict=True))


def since(now: Mapping[tuple[str, int], int], before: Mapping[tuple[str, int], int]) -> int:
    """Records added between two readings of the same partitions."""
    return sum(max(0, end - before.get(tp, 0)) for tp, end in now.items())


def copy_reasons(broker: BrokerPort, before: Offsets) -> Counter[str]:
    """RQ or DLQ records written since `before` (the partitions' ends then), counted by why:
    `<reason>: <error class>` for a failed message, `sidelined` for one that waited behind its
    group's failure."""
    reasons: Counter[str] = Counter()
    for record in read_from(broker, before):
        try:
            failure = decode_internal(record.headers()).failure
        except UndecodableMessage:
            reasons["undecodable headers"] += 1
            continue
        reasons["sidelined" if failure is None else f"{failure.reason}: {failure.error_class}"] += 1
    return reasons


def completions_seen(settings: Settings, batch_id: str | None) -> int:
    """Completion events of `batch_id` on BATCH_COMPLETIONS_TOPIC (at least once: consumers dedupe)."""
    if batch_id is None:
        return 0
    key = str(batch_id).encode()
    return sum(1 for k, _ in read_to_end(broker_for(settings), settings.batch_completions_topic) if k == key)
