"""One shard of one subscription at work: read its MQ and RQ partitions, decide per message with
the GroupState rules, deliver, sideline to RQ or dead-letter, and commit offsets only after the
endpoint or the broker confirmed (at-least-once, owned here rather than left to Faust's acks).

Storage topics of MQ and RQ are read one at a time, in order: T_{i+1} only after the shard's
partitions of T_i are drained and the produce pointer moved past T_i (plus a grace period for
producers still holding the old pointer), so a group's order holds across SwitchProduce.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Sequence

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from app.composite.advance import may_leave, read_index
from app.composite.model import CompositeTopic, StorageTopic
from app.composite.producer import AsyncCompositeProducer
from app.composite.routing import partition_for
from app.composite.store import MetadataStore
from app.crashpoints import crash_point
from app.kafka.admin import committed_offsets
from app.kafka.broker import FetchGuard, broker_for
from app.kafka.reading import read_from
from app.ordered.errors import UndecodableMessage
from app.ordered.lease import Lease
from app.ordered.orphans import Queue, adopt
from app.ordered.ownership import LaneOwnership
from app.ordered.records import decode_group_id
from app.ordered.retries import take_due
from app.ordered.rules import GroupState, MessageState, Position, forgettable, settled
from app.ordered.work import SourceRecord, Work
from app.settings import Settings
from app.subscription.batch import BatchDelivery
from app.subscription.delivery import Delivery, ShardStates, ShardStats, main_work, rq_work
from app.subscription.endpoints import BatchSink, Endpoint
from app.subscription.errors import InvalidSubscription
from app.subscription.model import Subscription
from app.subscription.orphans import INCARNATION_HEADER, copy_of, fed_headers, fed_place
from app.subscription.owners import lane_of
from app.subscription.shards import assignments, chain_keeps_shards, check_shardable, shard_of_group

__all__ = ["ShardRunner", "ShardStates", "ShardStats"]

log = logging.getLogger(__name__)


# Loads the states of the groups a shard owns in a storage topic (the GroupState table).
LoadStates = Callable[[StorageTopic], Awaitable[ShardStates]]


class _Reader:
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


class ShardRunner:
    def __init__(
        self,
        settings: Settings,
        sub: Subscription,
        shard_id: int,
        states: ShardStates,
        endpoint: Endpoint | None,
        metadata: MetadataStore,
        batch_sink: BatchSink | None = None,
        load_states: LoadStates | None = None,
        ownership: LaneOwnership | None = None,
    ) -> None:
        """Give `endpoint` (kinds http, callable) or `batch_sink` (kind batch). `load_states`
        loads the states of the groups this shard owns in a storage topic: called at start when
        the shard reads a storage topic whose groups map to shards unlike the produce pointer's
        (the one `states` was loaded for). `ownership`: the worker's leases; the shard claims its
        lane there before it reads anything and stops at the first act its lease no longer
        covers (`app.ordered.lease`). Without it the shard assumes it is the only owner."""
        self.settings = settings
        self.sub = sub
        self.shard_id = shard_id
        self.states = states
        self._load_states = load_states
        self.metadata = metadata
        self.broker = broker_for(settings)
        self.stats = ShardStats()
        self.stopping = asyncio.Event()
        self._ownership = ownership
        self.lease: Lease | None = None
        self.generation = sub.epoch  # MQ rewinds bump the epoch: older "handled" marks no longer apply
        grace = 2 * settings.metadata_refresh_s + 1.0
        self.mq = _Reader(sub.topic, shard_id, sub.shard_count, grace)
        self.rq = _Reader(sub.rq_topic, shard_id, sub.shard_count, grace)
        self._rq_buffers: dict[TopicPartition, deque[Work]] = defaultdict(deque)
        self._rq_read: dict[TopicPartition, int] = {}  # the offset after the last RQ copy read
        self._rq_next_due_ms: float | None = None  # when the soonest waiting RQ copy comes due
        self._consumer: AIOKafkaConsumer | None = None
        self._guard: FetchGuard | None = None  # reads back records the client skipped
        self._rq_out: AsyncCompositeProducer | None = None
        self._dlq_out: AsyncCompositeProducer | None = None
        self._topics: dict[str, tuple[CompositeTopic, float]] = {}
        # Old RQ storage topics the shard count does not divide: fed into the current RQ storage
        # topic (this shard feeds partitions p with p % shard_count == shard_id); RQ is consumed
        # only once every shard finished feeding (seed: ChangeShardCount step 4).
        self._feed_all: list[TopicPartition] = []
        self._feed: set[TopicPartition] = set()
        self._mq_gate_logged = -1
        self._committed: dict[TopicPartition, int] = {}  # the offsets the broker took, by partition
        # Every copy fed from old RQ storage topics lies below these: (the RQ storage topic the
        # producers wrote to, its end offset per partition), taken once feeding was over.
        self._fed_below: tuple[int, list[int]] | None = None
        self._feed_over_seen_at: float | None = None  # time.monotonic() when first asked
        self.delivery = Delivery(
            settings,
            sub,
            states,
            self.stats,
            self._produce_to,
            self.generation,
            endpoint,
            check=self.check_lease,
        )
        self._batch = (
            None
            if batch_sink is None
            else BatchDelivery(
                self.delivery, batch_sink, settings.subscription_batch_max, sub.endpoint.timeout_s
            )
        )

    @property
    def label(self) -> str:
        return f"{self.sub.name}/shard-{self.shard_id}"

    # -- lifecycle --------------------------------------------------------------------------
    async def run(self) -> None:
        if self._ownership is not None:
            self.lease = await self._claim(self._ownership)
            if self.lease is None:
                return
        try:
            await self._run()
        finally:
            if self._ownership is not None and self.lease is not None:
                await self._ownership.release(self.lease)

    async def _claim(self, ownership: LaneOwnership) -> Lease | None:
        """This shard's lease, once it may act; None when the shard was stopped meanwhile."""
        claiming = asyncio.ensure_future(ownership.acquire(lane_of(self.sub.name, self.shard_id)))
        stopped = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait([claiming, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not claiming.done():
            claiming.cancel()
            return None
        lease = claiming.result()
        self.delivery.owner_epoch = lease.epoch
        log.info("%s owns its lane at epoch %d", self.label, lease.epoch)
        return lease

    def check_lease(self) -> None:
        """Raise `LaneLost` unless this shard's lease covers an act now (a write or a delivery)."""
        if self.lease is not None:
            self.lease.check(time.monotonic())

    async def _run(self) -> None:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap,
            group_id=self.sub.consumer_group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        await self._consumer.start()
        consumer = self._consumer
        self._guard = self.broker.fetch_guard(
            lambda topic, partition, offset: consumer.seek(TopicPartition(topic, partition), offset)
        )
        # copies: a record over MAX_PAYLOAD_BYTES that MQ holds must still go to RQ/DLQ
        self._rq_out = AsyncCompositeProducer(
            self.settings, self.sub.rq_topic, store=self.metadata, copies=True
        )
        self._dlq_out = AsyncCompositeProducer(
            self.settings, self.sub.dlq_topic, store=self.metadata, copies=True
        )
        try:
            await self._skip_drained(self.mq)
            await self._states_for_mq()
            await self._plan_feed()
            await self._skip_drained(self.rq)
            await self._adopt_orphans()
            await self._assign()
            log.info("%s started at MQ storage %d, RQ storage %d", self.label, self.mq.idx, self.rq.idx)
            next_check = 0.0
            while not self.stopping.is_set():
                await self._step()
                if time.monotonic() >= next_check:
                    await self._maybe_advance()
                    next_check = time.monotonic() + 0.5
        finally:
            if self.lease is None or self.lease.may_act(time.monotonic()):
                await self.states.flush()
            else:  # another owner has the lane: what this one did not write is redone there
                log.warning("%s lost its lane: group states not written", self.label)
            await self._consumer.stop()
            await self._rq_out.close()
            await self._dlq_out.close()
            log.info("%s stopped", self.label)

    def stop(self) -> None:
        self.stopping.set()

    def owns(self, group_id: str) -> bool:
        """Is `group_id` this shard's: does it map here in the MQ storage topic being read?"""
        storage = self._topic(self.mq).storage_topics[self.mq.idx]
        return shard_of_group(group_id, storage, self.sub.shard_count) == self.shard_id

    # -- storage topic order --------------------------------------------------------------------
    def _topic(self, reader: _Reader) -> CompositeTopic:
        return self._composite(reader.name)

    def _composite(self, name: str) -> CompositeTopic:
        """Composite-topic definitions, re-read every COMPOSITE_METADATA_REFRESH_S."""
        known = self._topics.get(name)
        if known is None or time.monotonic() - known[1] > self.settings.metadata_refresh_s:
            known = self._topics[name] = (self.metadata.get(name), time.monotonic())
        return known[0]

    async def _assign(self) -> None:
        """While old RQ storage topics are fed, only feed: a message sidelined into the new RQ
        before its group's older RQ messages were fed would be read ahead of them."""
        assert self._consumer is not None and self._guard is not None
        tps = sorted(self._feed)
        if not self._feed_all:
            tps += self.mq.partitions(self._topic(self.mq)) + self.rq.partitions(self._topic(self.rq))
        self._rq_buffers.clear()
        self._consumer.assign(tps)
        # Each partition must continue at the group's committed offset (0 where none): a client
        # resetting to "earliest" can start past records the embedded broker holds (app.kafka.embedded).
        places = [(tp.topic, tp.partition) for tp in tps]
        if not places:  # waiting for other shards to finish feeding
            self._guard.reassigned({})
            return
        starts = await asyncio.to_thread(
            committed_offsets, self.settings.bootstrap, self.sub.consumer_group, places
        )
        self._guard.reassigned(dict(zip(places, starts, strict=True)))
        self._committed = dict(zip(tps, starts, strict=True))

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

    async def _adopt_orphans(self) -> None:
        """Record the RQ/DLQ copies written before a crash whose state write never landed
        (`app.subscription.orphans`): RQ from the committed offsets of the RQ storage topics still
        to be read, DLQ from the start of its current storage topic (it has no reader to commit)."""
        rq, dlq = self._topic(self.rq), self._composite(self.sub.dlq_topic)
        rq_tps = [
            (a.storage_topic, p)
            for a in assignments(rq, self.shard_id, self.sub.shard_count, self.rq.idx)
            for p in a.assigned_partitions
        ]
        committed = await asyncio.to_thread(
            committed_offsets, self.settings.bootstrap, self.sub.consumer_group, rq_tps
        )
        dlq_at = assignments(dlq, self.shard_id, self.sub.shard_count, dlq.produce_pointer)[0]
        plan: list[tuple[Queue, CompositeTopic, dict[tuple[str, int], int]]] = [
            ("rq", rq, dict(zip(rq_tps, committed, strict=True))),
            ("dlq", dlq, {(dlq_at.storage_topic, p): 0 for p in dlq_at.assigned_partitions}),
        ]
        adopted = await asyncio.to_thread(self._read_orphans, plan)
        for group_id, state in adopted.items():
            self.states.put(group_id, state)
        if self.stats.adopted:
            self.check_lease()
            await self.states.flush()
            log.warning(
                "%s: recorded %d RQ/DLQ copies written before a crash that its group states lacked",
                self.label,
                self.stats.adopted,
            )

    def _read_orphans(
        self, plan: list[tuple[Queue, CompositeTopic, dict[tuple[str, int], int]]]
    ) -> dict[str, GroupState]:
        """The states to write: each group's state with the copies it lacks recorded. Read as a
        stream (a DLQ is read from its start): only the groups that lack a copy are kept."""
        adopted: dict[str, GroupState] = {}
        earlier: dict[str, list[MessageState]] = defaultdict(list)  # RQ copies read, per group
        for queue, topic, starts in plan:
            for msg in read_from(self.broker, starts):
                at = (topic.index_of(msg.topic()), msg.offset())
                copy = copy_of(
                    queue,
                    msg.key(),
                    msg.headers(),
                    at,
                    self.sub.incarnation,
                    self.settings.max_group_id_bytes,
                )
                if copy is None:
                    continue
                known = adopted.get(copy.group_id) or self.states.get(copy.group_id)
                new = adopt(known, copy, self.delivery.engine.generation, earlier[copy.group_id])
                if new is not None:
                    adopted[copy.group_id] = new
                    self.stats.adopted += 1
                if queue == "rq":
                    earlier[copy.group_id].append(copy.at)
        return adopted

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

    async def _skip_drained(self, reader: _Reader) -> None:
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

    # -- the loop -----------------------------------------------------------------------------
    async def _step(self) -> None:
        assert self._consumer is not None and self._guard is not None
        rq_names = {tp.topic for tp in self.rq.partitions(self._topic(self.rq))}
        if not self._consumer.assignment():  # waiting for other shards to finish feeding
            await asyncio.sleep(0.2)
            return
        self.check_lease()
        batch = await self._consumer.getmany(
            timeout_ms=self._wait_ms(), max_records=self.settings.subscription_batch_max
        )
        mq_items: list[Work] = []
        commit: dict[TopicPartition, int] = {}
        for tp, run in batch.items():
            records = self._guard.admit_run(tp.topic, tp.partition, run)
            if not records:  # sought back: the partition's records come again
                continue
            if tp in self._feed:
                await self._feed_records(records)
                commit[tp] = records[-1].offset + 1
            elif tp.topic in rq_names:
                buffer = self._rq_buffers[tp]
                buffer.extend(self._rq_item(rec) for rec in records)
                self._rq_read[tp] = records[-1].offset + 1
                if len(buffer) >= self.settings.subscription_batch_max:
                    self._consumer.pause(tp)
            else:
                mq_items += [self._mq_item(rec) for rec in records]
                commit[tp] = records[-1].offset + 1
        due = self._due_rq_items(commit)
        await self._deliver(due + mq_items)
        if commit:
            self.check_lease()
            await self.states.flush()  # GroupState changes reach the changelog before offsets move
            self.check_lease()
            crash_point("subscription.offsets.commit")
            await self._consumer.commit(commit)
            self._committed.update(commit)
            await self._forget_settled()
        self.stats.rq_buffered = sum(len(b) for b in self._rq_buffers.values())

    def _wait_ms(self) -> int:
        if self._rq_next_due_ms is None:
            return 200
        return int(max(0, min(200, self._rq_next_due_ms - time.time() * 1000)))

    def _due_rq_items(self, commit: dict[TopicPartition, int]) -> list[Work]:
        """The RQ copies whose time has come (`take_due`: per group in RQ order, no group held
        behind another's backoff). A partition's commit stops at its first copy still waiting."""
        assert self._consumer is not None
        now_ms = time.time() * 1000
        out: list[Work] = []
        next_due_ms: float | None = None
        for tp, buffer in self._rq_buffers.items():
            if not buffer:
                continue
            taken = take_due(buffer, now_ms, _itself)
            later = taken.next_due_ms
            if later is not None:
                soonest = later if next_due_ms is None else min(next_due_ms, later)
                next_due_ms = soonest
            if not taken.due:
                continue
            out += taken.due
            self._rq_buffers[tp] = deque(taken.rest)
            commit[tp] = taken.rest[0].record.offset if taken.rest else self._rq_read[tp]
            if len(taken.rest) < self.settings.subscription_batch_max and tp in self._consumer.paused():
                self._consumer.resume(tp)
        self._rq_next_due_ms = next_due_ms
        return out

    def _mq_item(self, rec: ConsumerRecord[bytes, bytes]) -> Work:
        return main_work(rec, self.mq.idx, self.settings.max_group_id_bytes)

    def _rq_item(self, rec: ConsumerRecord[bytes, bytes]) -> Work:
        return rq_work(rec, self.rq.idx, self.settings.max_group_id_bytes, fed_place(rec.headers))

    async def _deliver(self, items: list[Work]) -> None:
        if self._batch is not None:
            await self._batch.process(items)
        else:
            await self.delivery.process(items)

    async def _produce_to(
        self, queue: Queue, group: str, rec: SourceRecord, copy_headers: Sequence[tuple[str, bytes]]
    ) -> Position:
        out = self._rq_out if queue == "rq" else self._dlq_out
        assert out is not None
        self.check_lease()
        headers = dict(copy_headers)
        headers[INCARNATION_HEADER] = self.sub.incarnation.encode()
        delivered = await out.produce(group, rec.value or b"", headers=headers)
        if queue == "rq":  # the broker has the copy; the group's state does not say so yet
            crash_point("subscription.rq.confirmed")
        else:
            crash_point("subscription.dlq.confirmed")
        out_name = self.sub.rq_topic if queue == "rq" else self.sub.dlq_topic
        return (self._composite(out_name).index_of(delivered.topic), delivered.offset)

    async def _commit_positions(self) -> None:
        assert self._consumer is not None
        self.check_lease()
        await self.states.flush()
        offsets: dict[TopicPartition, int] = {}
        for tp in self._consumer.assignment():
            if tp.topic in {t.topic for t in self._rq_buffers if self._rq_buffers[t]}:
                continue
            offsets[tp] = await self._consumer.position(tp)
        if offsets:
            self.check_lease()
            crash_point("subscription.offsets.commit")
            await self._consumer.commit(offsets)
            self._committed.update(offsets)

    # -- settled states ---------------------------------------------------------------------------
    async def _forget_settled(self) -> None:
        """A group that failed once does not keep its state for ever: after each commit, the states
        `forgettable` says decide nothing any more are dropped, judged against the committed
        offsets (a crash reads MQ and RQ again from there, nothing below). Between steps nothing
        of the shard is in flight. Not while old RQ partitions are fed (their copies' marks move)."""
        if self._feed_all:
            return
        mq, rq = self._topic(self.mq), self._topic(self.rq)
        gone: list[str] = []
        for group in self.states.to_check():
            state = self.states.get(group)
            if state is None or not settled(state):
                self.states.checked(group)  # until its next write
                continue
            main_idx = self.mq.idx if state.handled is None else state.handled[0]
            main_from = self._resumes_at(mq, self.mq, group, main_idx)
            rq_from: Position | None = None
            if state.rq.c is not None and state.rq.c.internal_topic_idx < self.rq.idx:
                if not await self._read_past_fed_copies(group):
                    continue  # judged again after the next commit, until the reader passed them
                rq_from = (self.rq.idx, 0)  # every place in a storage topic left behind
            elif state.rq.c is not None:
                rq_from = self._resumes_at(rq, self.rq, group, state.rq.c.internal_topic_idx)
            if main_from is None or (state.rq.c is not None and rq_from is None):
                self.states.checked(group)  # a mark it cannot judge: kept until written again
                continue
            if forgettable(state, main_from, rq_from):
                gone.append(group)
        if gone:
            await self.states.forget(gone)
            self.stats.forgotten += len(gone)

    async def _read_past_fed_copies(self, group: str) -> bool:
        """Has the shard committed past every copy of `group` fed from the RQ storage topics it
        left? A fed copy keeps its original place, in the old topic, as the group's mark, and a
        copy fed twice (a feeder cut and restarted) waits above the first, where only that mark
        skips it. Feeding is over when this is asked (not while old partitions are fed), so every
        fed copy lies below the end offsets of the storage topic the RQ producers write to, once
        SUBSCRIPTION_FED_SETTLE_S has passed: a feeder replaced meanwhile (its slot revoked, its
        task cancelled) may have handed copies to its producer, which still delivers them later."""
        if self._fed_below is None:
            now = time.monotonic()
            if self._feed_over_seen_at is None:
                self._feed_over_seen_at = now
            if now - self._feed_over_seen_at < self.settings.subscription_fed_settle_s:
                return False
            # the definition as written, not the cached one: no producer wrote past its pointer
            topic = await asyncio.to_thread(self.metadata.get, self.sub.rq_topic)
            storage = topic.storage_topics[topic.produce_pointer]
            places = [(storage.name, p) for p in range(storage.partitions)]
            ends = await asyncio.to_thread(self.broker.end_offsets, places)
            self._fed_below = (topic.produce_pointer, ends)
        last, ends = self._fed_below
        if self.rq.idx != last:
            return self.rq.idx > last
        storage = self._topic(self.rq).storage_topics[last]
        partition = partition_for(group, storage.partitions, storage.k)
        committed = self._committed.get(TopicPartition(storage.name, partition))
        return committed is not None and committed >= ends[partition]

    def _resumes_at(self, topic: CompositeTopic, reader: _Reader, group: str, idx: int) -> Position | None:
        """Where a restarted shard reads `group`'s records of storage topic `idx` again from: the
        committed offset in the one being read. None when unknown: a later storage topic (not
        read yet), and, for RQ, an earlier one (`_read_past_fed_copies` judges those). A mark in
        an earlier MQ storage topic has passed (the topic was left drained and is never fed)."""
        if idx < reader.idx and reader is self.mq:
            return (reader.idx, 0)
        if idx != reader.idx or idx >= len(topic.storage_topics):
            return None
        storage = topic.storage_topics[idx]
        offset = self._committed.get(
            TopicPartition(storage.name, partition_for(group, storage.partitions, storage.k))
        )
        return None if offset is None else (idx, offset)


def _itself(work: Work) -> Work:
    return work
