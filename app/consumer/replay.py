"""Replaying a library consumer's dead letters, with the subscription's rules (`app.subscription.
replay.select_replays`, `on_unsidelined`) applied per source partition.

Runs while no copy of the consumer is alive (no copy owns the keys' states meanwhile): copies the
selected DLQ records of each key, in the key's DLQ order, into `<name>-retry` (partition = the
source partition, marked `hs-replay`, attempts reset), then writes each key's new state (DLQ
consumed up to its last replayed entry, the retry copies recorded) to `<name>-state`. Copies of the
consumer started afterwards hand the replays to the handler before the key's later messages; a
replay that fails goes back to DLQ once (reason `replay-failed`), never to a retry.

A crash between the copies and the state writes leaves copies the states do not record: the next
copy to start adopts them (`app.consumer.orphans`), and a second replay of the same selection
hands those messages over again (at least once).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import orjson

from app.consumer.engine import KEY_HEADER
from app.consumer.inspect import members
from app.consumer.orphans import DLQ_MARK_KEY
from app.crashpoints import crash_point
from app.errors import ConflictError
from app.kafka.admin import KafkaAdmin
from app.kafka.broker import BrokerPort
from app.kafka.producing import AsyncProducer
from app.kafka.reading import read_from
from app.ordered.errors import UndecodableMessage, UndecodableState
from app.ordered.fencing import settle_lanes
from app.ordered.owner_log import KafkaOwnerLog
from app.ordered.records import InternalMeta, decode_internal, encode_internal, header_map
from app.ordered.rules import GroupState, MessageState, on_unsidelined, state_of_record
from app.subscription.replay import DlqEntry, ReplaySelection, select_replays

__all__ = ["ConsumerRunning", "replay_dead_letters"]


class ConsumerRunning(ConflictError):
    """A copy of the consumer is alive: stop every copy before replaying its dead letters."""


def _newest_states(broker: BrokerPort, topic: str, partitions: list[int]) -> dict[int, dict[str, GroupState]]:
    states: dict[int, dict[str, GroupState]] = defaultdict(dict)
    for msg in read_from(broker, {(topic, p): 0 for p in partitions}, compacted=True):
        if msg.key() == DLQ_MARK_KEY:
            continue
        key = (msg.key() or b"").decode("utf-8", "replace")
        if msg.value() is None:
            states[msg.partition()].pop(key, None)
        else:
            try:
                states[msg.partition()][key] = state_of_record(msg.value())
            except UndecodableState:
                continue  # as if never written: the key's previous state stands
    return states


def _dead_letters(
    broker: BrokerPort, topic: str, partitions: list[int]
) -> dict[int, list[tuple[DlqEntry, Any]]]:
    """Each partition's dead letters of a known key (undecodable records have none: never replayed)."""
    found: dict[int, list[tuple[DlqEntry, Any]]] = defaultdict(list)
    for msg in read_from(broker, {(topic, p): 0 for p in partitions}):
        headers = list(msg.headers() or ())
        key = header_map(headers).get(KEY_HEADER)
        if key is None:
            continue
        try:
            meta = decode_internal(headers)
        except UndecodableMessage:
            continue
        failed_ms = meta.failure.failed_ms if meta.failure is not None else 0
        entry = DlqEntry(
            key.decode("utf-8", "replace"),
            meta.message_id,
            meta.main,
            meta.main_partition,
            (0, msg.offset()),
            failed_ms,
        )
        found[msg.partition()].append((entry, msg))
    return found


async def _copy_and_record(
    bootstrap: str,
    name: str,
    plans: dict[int, dict[str, list[DlqEntry]]],
    records: dict[Any, Any],
    states: dict[int, dict[str, GroupState]],
) -> None:
    producer = AsyncProducer(bootstrap, name=f"{name}-replay")
    try:
        written: dict[tuple[int, str], list[MessageState]] = defaultdict(list)
        for partition, plan in plans.items():
            for key, picked in plan.items():
                for entry in picked:
                    msg = records[(partition, entry.dlq[1])]
                    meta = InternalMeta(entry.main, entry.main_partition, entry.message_id, 0, 0, replay=True)
                    headers = [*encode_internal(meta, msg.headers()), (KEY_HEADER, key.encode())]
                    crash_point("consumer.replay.retry_copy")
                    delivered = await producer.send(
                        f"{name}-retry", partition, msg.key(), msg.value(), headers
                    )
                    written[(partition, key)].append(MessageState.at(entry.main, (0, delivered.offset)))
        for partition, plan in plans.items():
            for key, picked in plan.items():
                last = picked[-1]
                old = states.get(partition, {}).get(key) or GroupState()
                new = on_unsidelined(old, MessageState.at(last.main, last.dlq), written[(partition, key)])
                value = orjson.dumps({"s": new.to_json(), "replayed": True})
                # every copy is in the retry topic; this key's state does not say so yet (nor, past
                # the first hit, the states after it)
                crash_point("consumer.replay.states")
                await producer.send(f"{name}-state", partition, key.encode(), value)
    finally:
        await producer.close()


def replay_dead_letters(broker: BrokerPort, name: str, selection: ReplaySelection) -> dict[str, Any]:
    """Replay the selected unresolved dead letters (`selection.group_id` selects an ordering key)."""
    alive = members(broker, name)
    if alive:
        raise ConsumerRunning(
            f"consumer {name!r} has {len(alive)} live copies ({', '.join(m.member for m in alive[:3])}); "
            "stop every copy before replaying its dead letters"
        )
    topics = KafkaAdmin(broker.bootstrap).topics()
    if f"{name}-owners" in topics:  # a copy killed or paused holding partitions must not act now
        owner_log = KafkaOwnerLog(
            broker,
            f"{name}-owners",
            replication_factor=1,  # the topic exists: nothing is created
            claim_point="consumer.owner.claim",
            release_point="consumer.owner.release",
        )
        try:
            settle_lanes(
                owner_log, lambda lane: lane.startswith(f"{name}/p"), who=f"replay-{name}", patience_s=0
            )
        finally:
            owner_log.close()
    partitions = list(range(topics.get(f"{name}-dlq", 0)))
    states = _newest_states(broker, f"{name}-state", partitions)
    letters = _dead_letters(broker, f"{name}-dlq", partitions)
    plans: dict[int, dict[str, list[DlqEntry]]] = {}
    records: dict[tuple[int, int], Any] = {}
    for partition, found in letters.items():
        plan = select_replays([entry for entry, _ in found], states.get(partition, {}), selection)
        if plan:
            plans[partition] = plan
            records.update(((partition, entry.dlq[1]), msg) for entry, msg in found)
    if plans:
        asyncio.run(_copy_and_record(broker.bootstrap, name, plans, records, states))
    return {
        "consumer": name,
        "replayed": sum(len(picked) for plan in plans.values() for picked in plan.values()),
        "keys": {
            f"{key}@{partition}": [e.message_id for e in picked]
            for partition, plan in sorted(plans.items())
            for key, picked in sorted(plan.items())
        },
    }
