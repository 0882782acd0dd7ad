"""GroupState of subscriptions in a RocksDB-backed Faust table with a changelog.

The table has SUBSCRIPTION_SHARD_SLOTS partitions, co-partitioned with the slot topic whose
partitions Faust assigns to workers: owning slot partition s means owning the shards that map
to s (`app.subscription.shards.slot_of`). A shard's states are written to its slot partition.

A shard loads its states from the changelog itself, reading to its end as the broker port
answers it (app.kafka.broker). Where the port says a recovered table may miss its changelog's
newest records (`recovery_misses_newest`: the embedded Tansu broker, whose ListOffsets answer,
the base offset of the last batch + 1, Faust's recovery reads up to), the difference found against
the local RocksDB partition is logged and counted (`missed_on_recovery`) and written back.
Reading every slot also re-shards states after a shard-count change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import faust
import orjson

from app.crashpoints import crash_point
from app.kafka.broker import broker_for
from app.ordered.errors import UndecodableState
from app.ordered.rules import GroupState, state_of_record
from app.settings import Settings
from app.subscription.memory import MemoryStates
from app.subscription.statelog import TABLE_NAME, scan_states, state_key

__all__ = ["GroupStateTable", "SlotStates"]

log = logging.getLogger(__name__)


class SlotStates(MemoryStates):
    """One shard's GroupStates: the in-memory map (and its forget bookkeeping) written through to
    the table's slot partition."""

    def __init__(self, table: GroupStateTable, subscription: str, epoch: int, slot: int) -> None:
        super().__init__()
        self.table = table
        self.subscription = subscription
        self.epoch = epoch
        self.slot = slot
        self.missed_on_recovery = 0
        self._in_flight: list[Any] = []  # changelog sends not yet confirmed by Kafka

    def put(self, group_id: str, state: GroupState) -> None:
        crash_point("subscription.state.write")
        self.load(group_id, state)
        self._in_flight.append(
            self.table.write(
                self.slot, state_key(self.subscription, group_id), {"e": self.epoch, "s": state.to_json()}
            )
        )

    def load(self, group_id: str, state: GroupState) -> None:
        """Hold a state the changelog has (or is being sent)."""
        super().put(group_id, state)

    async def forget(self, group_ids: Sequence[str]) -> None:
        """Forget the groups' states: tombstones in every other slot partition, confirmed, then in
        this one. A shard-count change leaves a group's older records (older epochs) in other
        slots; this slot's newer record outranks them until its own tombstone, so a crash
        between the two never brings an older state back. Without this slot's tombstone the next
        shard loads the state, which decides the same as none."""
        await super().forget(group_ids)  # the crash point, and out of memory
        keys = [state_key(self.subscription, g) for g in group_ids]
        others = [s for s in range(self.table.slots) if s != self.slot]
        sent = [f for key in keys for f in self.table.delete(others, key)]
        await self.table.flush()
        await asyncio.gather(*sent)
        for key in keys:
            self._in_flight += self.table.delete([self.slot], key)
            self.table.delete_local(self.slot, key)

    async def flush(self) -> None:
        """Return once Kafka confirmed every state written so far; raise when it refused one (the
        shard then stops without committing offsets, and its restart reads the changelog again)."""
        await self.table.flush()
        sent, self._in_flight = self._in_flight, []
        await asyncio.gather(*sent)


class GroupStateTable:
    def __init__(self, app: faust.App, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.broker = broker_for(settings)
        self.slots = settings.subscription_shard_slots
        self.table: Any = app.Table(
            TABLE_NAME,
            partitions=self.slots,
            key_type=bytes,
            value_type=bytes,
            help="GroupState per subscription and group, one partition per shard slot",
        )

    @property
    def changelog(self) -> str:
        return str(self.table.changelog_topic.get_topic_name())

    def write(self, slot: int, key: bytes, value: dict[str, Any]) -> Any:
        """Send the record to the slot's changelog partition; the returned future resolves when
        Kafka confirmed it. (RocksDB is a cache here: shards load from the changelog.)"""
        raw = orjson.dumps(value)
        sent = self.table.send_changelog(slot, key, raw, key_serializer="raw", value_serializer="raw")
        local = self._local(slot)
        if local is not None:
            local.put(key, raw)
        return sent

    def delete(self, slots: Sequence[int], key: bytes) -> list[Any]:
        """Tombstones for `key` in these slot partitions' changelog; futures as for `write`."""
        return [
            self.table.send_changelog(slot, key, None, key_serializer="raw", value_serializer="raw")
            for slot in slots
        ]

    def delete_local(self, slot: int, key: bytes) -> None:
        """Remove `key` from the RocksDB partition of a slot this worker owns (others it does not
        open: each would be a database created for nothing)."""
        local = self._local(slot)
        if local is not None:
            local.delete(key)

    async def flush(self) -> None:
        await self.app.producer.flush()

    def _local(self, slot: int) -> Any:
        # The RocksDB partition behind the table. Faust has no public write for a chosen partition
        # outside a stream event (`table[k] = v` takes the partition from the current event), and
        # shards are not stream events: hence the private accessor, guarded; the changelog written
        # with the public `send_changelog` stays the source of truth (shards load from it).
        opener = getattr(self.table.data, "_db_for_partition", None)
        return None if opener is None else opener(slot)

    def read_local(self, slot: int, key: bytes) -> GroupState | None:
        local = self._local(slot)
        raw = None if local is None else local.get(key)
        if raw is None:
            return None
        try:
            return state_of_record(raw)
        except UndecodableState:
            return None  # differs from the changelog's: restored from it (`open_shard`)

    async def open_shard(
        self, subscription: str, epoch: int, slot: int, owns: Callable[[str], bool]
    ) -> SlotStates:
        """States of the groups this shard owns, newest epoch first, read from every slot's changelog."""
        latest = await asyncio.to_thread(scan_states, self.broker, self.changelog, self.slots, subscription)
        check_recovery = self.broker.recovery_misses_newest
        shard = SlotStates(self, subscription, epoch, slot)
        for group_id, (record_epoch, record_slot, value) in latest.items():
            if not owns(group_id):
                continue
            state = GroupState.from_json(value["s"])
            shard.load(group_id, state)
            key = state_key(subscription, group_id)
            if record_slot != slot or record_epoch != epoch:
                shard.put(group_id, state)  # re-shard: the group now lives in this slot
            elif check_recovery and self.read_local(slot, key) != state:
                shard.missed_on_recovery += 1
                shard.put(group_id, state)
        if shard.missed_on_recovery:
            log.warning(
                "%s[%d]: recovered table lacked the newest state of %d groups of %s "
                "(ListOffsets under-report); restored from the changelog",
                self.changelog,
                slot,
                shard.missed_on_recovery,
                subscription,
            )
        await self.flush()
        return shard
