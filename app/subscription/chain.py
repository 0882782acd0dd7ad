"""A shard's way along the storage topics of its MQ and RQ (the Varadhi design's SwitchProduce
and ChangeShardCount): which storage topic each reader reads, when it may move on, and which old
RQ storage topics the shard feeds into the current one after a shard-count change.

Storage topics are read one at a time, in order: T_{i+1} only after the shard's partitions of T_i
are drained and the produce pointer moved past T_i (plus a grace period for producers still
holding the old pointer), so a group's order holds across SwitchProduce.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from app.composite.advance import may_leave, read_index
from app.composite.model import CompositeTopic, StorageTopic
from app.composite.producer import AsyncCompositeProducer
from app.composite.store import MetadataStore
from app.crashpoints import crash_point
from app.kafka.broker import BrokerPort
from app.ordered.errors import UndecodableMessage
from app.ordered.lanes import GroupLanes
from app.ordered.records import decode_group_id
from app.ordered.work import Work
from app.settings import Settings
from app.subscription.delivery import Delivery, ShardStates, ShardStats, rq_work
from app.subscription.errors import InvalidSubscription
from app.subscription.model import Subscription
from app.subscription.orphans import fed_headers
from app.subscription.shards import assignments, chain_keeps_shards, check_shardable

__all__ = ["ChainReader", "LoadStates", "ShardChain"]

log = logging.getLogger(__name__)

LATE_CHECK_S = 30.0  # how often a shard counts records that landed in storage topics it left


# Loads the states of the groups a shard owns in a storage topic (the GroupState table).
LoadStates = Callable[[StorageTopic], Awaitable[ShardStates]]


class ChainReader:
    """Reads one composite topic's storage topics in order for one shard."""

    def __init__(self, name: str, shard_id: int, shard_count: int, grace_s: float) -> None:
        self.name = name
        self.shard_id = shard_id
        self.shard_count = shard_count
        self.grace_s = grace_s
        self.idx = 0
        self.switch_seen_at: float | None = None

    def partitions(self, topic: CompositeTopic) -> list[TopicPartition]:
        a = assignments(topic, self.shard_id, self.shard_count, self.idx)[0]
        return [TopicPartition(a.storage_topic, p) for p in a.assigned_partitions]


class ShardChain:
    """The storage-topic part of `ShardRunner` (which sets these attributes)."""

    settings: Settings
    sub: Subscription
    shard_id: int
    metadata: MetadataStore
    broker: BrokerPort
    states: ShardStates
    stats: ShardStats
    delivery: Delivery
    mq: ChainReader
    rq: ChainReader
    stopping: asyncio.Event
    _topics: dict[str, tuple[CompositeTopic, float]]
    _committed: dict[TopicPartition, int]
    _load_states: LoadStates | None
    _feed_all: list[TopicPartition]
    _feed: set[TopicPartition]
    _mq_gate_logged: int
    _rq_buffers: dict[TopicPartition, deque[Work]]
    _consumer: AIOKafkaConsumer | None
    _rq_out: AsyncCompositeProducer | None
    _lanes: GroupLanes[TopicPartition, str, Work] | None
    _late_check_at: float

    @property
    def label(self) -> str:
        return f"{self.sub.name}/shard-{self.shard_id}"

    if TYPE_CHECKING:  # defined by ShardRunner; a stub here must not stand in for them at runtime

        async def _commit_positions(self) -> None: ...
        def check_lease(self) -> None: ...
        async def _assign(self) -> None: ...

    # -- storage topic order --------------------------------------------------------------------
    def _topic(self, reader: ChainReader) -> CompositeTopic:
        return self._composite(reader.name)

    def _composite(self, name: str) -> CompositeTopic:
        """Composite-topic definitions, re-read every COMPOSITE_METADATA_REFRESH_S."""
        known = self._topics.get(name)
        if known is None or time.monotonic() - known[1] > self.settings.metadata_refresh_s:
            known = self._topics[name] = (self.metadata.get(name), time.monotonic())
        return known[0]

    async def _plan_feed(self) -> None:
        topic, count = self._topic(self.rq), self.sub.shard_count
        old = self.rq.idx
        while old < topic.produce_pointer and not chain_keeps_shards(
            topic, count, old, topic.produce_pointer
        ):
            old += 1
        if old == self.rq.idx:
            return
        tps = [
            TopicPartition(s.name, p)
            for s in topic.storage_topics[self.rq.idx : old]
            for p in range(s.partitions)
        ]
        self.rq.idx = old
        if not await self._drained(tps):
            self._feed_all = tps
            self._feed = {tp for tp in tps if tp.partition % count == self.shard_id}
            log.info("%s feeds %d old RQ partitions into RQ storage %d", self.label, len(self._feed), old)

    async def _feed_records(self, records: list[ConsumerRecord[bytes, bytes]]) -> None:
        """Re-produce old RQ records (headers kept) so routing puts them in their new shard."""
        assert self._rq_out is not None
        for rec in records:
            try:
                group = decode_group_id(rec.key, self.settings.max_group_id_bytes)
            except UndecodableMessage:
                work = rq_work(rec, self.rq.idx, self.settings.max_group_id_bytes)
                self.stats.count(await self.delivery.engine.undecodable(work))
                continue
            headers = fed_headers(rec.headers, (self._topic(self.rq).index_of(rec.topic), rec.offset))
            self.check_lease()
            crash_point("subscription.rq.fed")  # records fed so far come again after a restart
            await self._rq_out.produce(group, rec.value or b"", headers=headers)
            self.stats.fed += 1

    async def _drained(self, tps: list[TopicPartition]) -> bool:
        return all((await self._drained_facts(tps)).values())

    async def _drained_facts(self, tps: list[TopicPartition]) -> dict[int, bool]:
        """Per partition (all of one storage topic): is this shard's position (an assigned
        partition) or the group's committed offset (another) at the partition's end?"""
        assert self._consumer is not None
        ends = await asyncio.to_thread(self.broker.end_offsets, [(t.topic, t.partition) for t in tps])
        facts: dict[int, bool] = {}
        for tp, end in zip(tps, ends, strict=True):
            if tp in self._consumer.assignment():
                pos = await self._consumer.position(tp)
            else:
                pos = await self._consumer.committed(tp) or 0
            facts[tp.partition] = pos >= end
        return facts

    async def _skip_drained(self, reader: ChainReader) -> None:
        """Start past the drained storage topics, but (MQ) not where groups change shards while
        another shard may still deliver the topic before: the gate `_maybe_advance` keeps. Once
        every shard drained it (as change-shards waits for), the rest of the chain only has to
        suit this shard count.

        Producers may still write what the pointer just left, for the grace after the switch. A
        switch the definition dates (on the switching host's clock) within the grace plus the
        clock skew allowed is waited out on this host's own clock: the switch is older than this
        read of it, so one grace from now covers it. Deciding only then (rather than leaving the
        move to `_maybe_advance`, whose gate holds where groups change shards) lets a shard
        restarted right after a switch still start past a storage topic every shard drained."""
        topic = self._topic(reader)
        while topic.switched_within(int(time.time() * 1000), reader.grace_s, self.settings.clock_skew_s):
            seen = topic.switched_at_ms
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), reader.grace_s)
                return
            topic = await asyncio.to_thread(self.metadata.get, reader.name)
            if topic.switched_at_ms == seen:  # no switch since: its grace has passed
                break
        while may_leave(topic, reader.idx):
            drained = {reader.idx: await self._drained_facts(reader.partitions(topic))}
            idx = read_index(topic, reader.idx, drained)
            if idx == reader.idx:
                break
            if reader is self.mq and not await self._mq_may_leave(topic, reader.idx):
                self._mq_compatible(topic)  # logs why, and shows the shard held
                break
            reader.idx = idx

    async def _mq_may_leave(self, topic: CompositeTopic, idx: int) -> bool:
        count = self.sub.shard_count
        if chain_keeps_shards(topic, count, idx, idx + 1):
            return True
        storage = topic.storage_topics[idx]
        every = [TopicPartition(storage.name, p) for p in range(storage.partitions)]
        return chain_keeps_shards(topic, count, idx + 1, topic.produce_pointer) and await self._drained(every)

    async def _states_for_mq(self) -> None:
        """The states were loaded for the groups this shard owns at the produce pointer; held at
        the end of a storage topic whose groups map otherwise, it owns that topic's groups."""
        topic = self._topic(self.mq)
        if self._load_states is None or chain_keeps_shards(
            topic, self.sub.shard_count, self.mq.idx, topic.produce_pointer
        ):
            return
        self.states = self.delivery.states = await self._load_states(topic.storage_topics[self.mq.idx])
        log.warning("%s: states loaded for the groups of MQ storage %d it reads", self.label, self.mq.idx)

    def _mq_compatible(self, topic: CompositeTopic) -> bool:
        """May the shard move from MQ T_i to T_{i+1}? Not when groups would change shards there."""
        try:
            check_shardable(topic, self.sub.shard_count, self.mq.idx, self.mq.idx + 1)
        except InvalidSubscription as exc:
            if self._mq_gate_logged != self.mq.idx:
                self._mq_gate_logged = self.mq.idx
                log.warning("%s: stays at the end of MQ storage %d: %s", self.label, self.mq.idx, exc)
            self.stats.mq_held_at = self.mq.idx
            return False
        self.stats.mq_held_at = None
        return True

    async def _maybe_advance(self) -> None:
        moved = False
        if self._feed_all and await self._drained(self._feed_all):
            log.info("%s: old RQ storage topics fed, consuming RQ storage %d", self.label, self.rq.idx)
            self._feed_all, self._feed = [], set()
            moved = True
        for reader in (self.mq, self.rq):
            topic = self._topic(reader)
            if not may_leave(topic, reader.idx) or self._feed_all:
                continue
            if reader is self.mq and not self._mq_compatible(topic):
                continue
            if reader.switch_seen_at is None:
                reader.switch_seen_at = time.monotonic()
            if time.monotonic() - reader.switch_seen_at < reader.grace_s:
                continue
            if reader is self.rq and any(self._rq_buffers.values()):
                continue
            drained = {reader.idx: await self._drained_facts(reader.partitions(topic))}
            idx = read_index(topic, reader.idx, drained)
            if idx != reader.idx:
                log.info(
                    "%s: %s drained, reading storage topic %d",
                    self.label,
                    topic.storage_topics[reader.idx].name,
                    idx,
                )
                reader.idx = idx
                reader.switch_seen_at = None
                moved = True
        if moved:
            await self._commit_positions()
            await self._assign()
        self.stats.mq_storage_idx, self.stats.rq_storage_idx = self.mq.idx, self.rq.idx
        if time.monotonic() >= self._late_check_at:
            self._late_check_at = time.monotonic() + LATE_CHECK_S
            await self._check_late()

    async def _check_late(self) -> None:
        """Count the records that landed in the MQ storage topics before the one the shard reads
        after it left them: the group's committed offsets there are where it left (nothing commits
        them since). They are not delivered; this makes that loud (an ERROR line and
        `late_records`) instead of silent, until readers keep old storage topics (open work)."""
        topic = self._topic(self.mq)
        places: list[tuple[str, int]] = []
        for idx in range(self.mq.idx):
            a = assignments(topic, self.shard_id, self.sub.shard_count, idx)[0]
            places += [(a.storage_topic, p) for p in a.assigned_partitions]
        if not places:
            return
        assert self._consumer is not None  # the shard's own client answers committed offsets
        ends = await asyncio.to_thread(self.broker.end_offsets, places)
        left = [await self._consumer.committed(TopicPartition(t, p)) or 0 for t, p in places]
        late = sum(max(0, end - done) for end, done in zip(ends, left, strict=True))
        if late > self.stats.late_records:
            log.error(
                "%s: %d records landed in MQ storage topics before %s after this shard left them and "
                "are not delivered (a producer held the old definition past the switch grace, or its "
                "client retried that long)",
                self.label, late, topic.storage_topics[self.mq.idx].name,
            )  # fmt: skip
        self.stats.late_records = late
