"""Group states read and written by operations that run while the subscription is stopped
(`dlq unsideline`, the DLQ fast-forward of `reset-offset`): no shard owns the groups meanwhile.

States are read from the GroupState changelog (the newest record per group). New ones are written
to the changelog in the group's slot partition (the slot its newest record is in, else the slot of
the shard that owns the group in the current MQ storage topic), with the subscription's epoch;
then the epoch is bumped so that shards re-read and re-write the states when they start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Producer

from app.composite.store import MetadataStore
from app.crashpoints import crash_point
from app.errors import ServiceUnavailable
from app.kafka.admin import KafkaAdmin
from app.kafka.broker import broker_for
from app.kafka_security import client_config
from app.ordered.rules import GroupState
from app.settings import Settings
from app.subscription.model import Subscription
from app.subscription.registry import SubscriptionRegistry
from app.subscription.shards import shard_of_group, slot_of
from app.subscription.statelog import changelog_topic, scan_states, state_key

__all__ = ["StoredStates", "read_states", "write_states"]


@dataclass(frozen=True, slots=True)
class StoredStates:
    """Each group's newest state, and the changelog record it came from (epoch, slot, value)."""

    records: dict[str, tuple[int, int, dict[str, Any]]]
    states: dict[str, GroupState]


def read_states(settings: Settings, sub: Subscription) -> StoredStates:
    """The subscription's group states in the changelog (none when no worker ever wrote one)."""
    changelog = changelog_topic(settings.app_id)
    if changelog not in KafkaAdmin(settings.bootstrap).topics():
        return StoredStates({}, {})
    latest = scan_states(broker_for(settings), changelog, settings.subscription_shard_slots, sub.state_scope)
    return StoredStates(latest, {g: GroupState.from_json(v["s"]) for g, (_e, _slot, v) in latest.items()})


def write_states(
    settings: Settings,
    registry: SubscriptionRegistry,
    metadata: MetadataStore,
    sub: Subscription,
    stored: StoredStates,
    new: Mapping[str, GroupState],
    *,
    point: str,
) -> None:
    """Write the groups' `new` states (confirmed by the broker, else ServiceUnavailable), then bump
    the epoch when there was any. `point` names the crash point of the state writes."""
    changelog = changelog_topic(settings.app_id)
    mq = metadata.get(sub.topic).current
    producer = Producer(client_config(settings.bootstrap, **{"enable.idempotence": True}))
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    crash_point(point)
    for group, state in new.items():
        known = stored.records.get(group)
        slot = (
            known[1]
            if known is not None
            else slot_of(
                sub.name, shard_of_group(group, mq, sub.shard_count), settings.subscription_shard_slots
            )
        )
        value = orjson.dumps({"e": sub.epoch, "s": state.to_json()})
        producer.produce(
            changelog,
            key=state_key(sub.state_scope, group),
            value=value,
            partition=slot,
            on_delivery=on_delivery,
        )
    left = producer.flush(30)
    if errors or left:
        reason = errors[0] if errors else f"{left} records not confirmed in 30 s"
        raise ServiceUnavailable(f"{changelog}: state write failed: {reason}")
    if new:
        registry.put(sub.bump(epoch=sub.epoch + 1))  # shards re-read the states when they start
