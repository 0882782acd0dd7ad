"""One shard of one subscription at work: read its MQ and RQ partitions, decide per message with
the GroupState rules, deliver, sideline to RQ or dead-letter, and commit offsets only after the
endpoint or the broker confirmed (at-least-once, owned here rather than left to Faust's acks).

Its parts: the storage-topic chain (`app.subscription.chain`), adoption of copies written before
a crash (`app.subscription.adoption`) and forgetting of recovered groups' states
(`app.subscription.forgetting`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Sequence

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from app.composite.advance import switch_grace
from app.composite.model import CompositeTopic
from app.composite.producer import AsyncCompositeProducer
from app.composite.store import MetadataStore
from app.crashpoints import crash_point
from app.kafka.admin import committed_offsets
from app.kafka.broker import FetchGuard, broker_for
from app.kafka_security import kafka_security
from app.ordered.lanes import GroupLanes
from app.ordered.lease import Lease
from app.ordered.orphans import Queue
from app.ordered.ownership import LaneOwnership
from app.ordered.rules import Position
from app.ordered.work import SourceRecord, Work
from app.settings import Settings
from app.subscription.adoption import ShardAdoption
from app.subscription.batch import BatchDelivery
from app.subscription.chain import ChainReader, LoadStates
from app.subscription.delivery import Delivery, ShardStates, ShardStats, main_work
from app.subscription.endpoints import BatchSink, Endpoint
from app.subscription.forgetting import ShardForgetting
from app.subscription.model import Subscription
from app.subscription.orphans import INCARNATION_HEADER
from app.subscription.owners import lane_of
from app.subscription.retry_buffer import ShardRetryBuffer
from app.subscription.shards import shard_of_group

__all__ = ["ShardRunner", "ShardStates", "ShardStats"]

log = logging.getLogger(__name__)


class ShardRunner(ShardForgetting, ShardAdoption, ShardRetryBuffer):
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
        still_wanted: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        """Give `endpoint` (kinds http, callable) or `batch_sink` (kind batch). `load_states`
        loads the states of the groups this shard owns in a storage topic: called at start when
        the shard reads a storage topic whose groups map to shards unlike the produce pointer's
        (the one `states` was loaded for). `ownership`: the worker's leases; the shard claims its
        lane there before it reads anything and stops at the first act its lease no longer
        covers (`app.ordered.lease`). Without it the shard assumes it is the only owner.
        `still_wanted`: asked once the claim stands; False (the subscription was stopped or
        changed meanwhile) ends the run before it reads anything."""
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
        self._still_wanted = still_wanted
        self.lease: Lease | None = None
        self.generation = sub.epoch  # MQ rewinds bump the epoch: older "handled" marks no longer apply
        grace = switch_grace(settings.metadata_refresh_s)
        self.mq = ChainReader(sub.topic, shard_id, sub.shard_count, grace)
        self.rq = ChainReader(sub.rq_topic, shard_id, sub.shard_count, grace)
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
        self._late_check_at = 0.0  # when to count records landed in storage topics left (chain)
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
        # Concurrent endpoints: groups run side by side while the shard reads on, and a partition
        # is committed up to its first record not finished (no group waits for another's poll).
        self._lanes: GroupLanes[TopicPartition, str, Work] | None = (
            GroupLanes(self.delivery.handle_within_limit, settings.subscription_batch_max)
            if self._batch is None and self.delivery.concurrent
            else None
        )

    # -- lifecycle --------------------------------------------------------------------------
    async def run(self) -> None:
        if self._ownership is not None:
            self.lease = await self._claim(self._ownership)
            if self.lease is None:
                return
        try:
            if self._still_wanted is not None and not await self._still_wanted():
                log.info("%s: the subscription was stopped or changed before its claim stood", self.label)
                return
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
            **kafka_security().aiokafka(),
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
            await self._settle_lanes()
        finally:
            if self._lanes is not None:  # after a failure: what still runs is redone by the next run
                await self._lanes.cancel()
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

    async def _assign(self) -> None:
        """While old RQ storage topics are fed, only feed: a message sidelined into the new RQ
        before its group's older RQ messages were fed would be read ahead of them."""
        assert self._consumer is not None and self._guard is not None
        tps = sorted(self._feed)
        if not self._feed_all:
            tps += self.mq.partitions(self._topic(self.mq)) + self.rq.partitions(self._topic(self.rq))
        self._rq_buffers.clear()
        if self._lanes is not None:  # drained by `_commit_positions` before any reassignment
            self._lanes.reset()
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

    # -- the loop -----------------------------------------------------------------------------
    async def _step(self) -> None:
        assert self._consumer is not None and self._guard is not None
        rq_names = {tp.topic for tp in self.rq.partitions(self._topic(self.rq))}
        if not self._consumer.assignment():  # waiting for other shards to finish feeding
            await asyncio.sleep(0.2)
            return
        self.check_lease()
        lanes = self._lanes
        if lanes is not None:
            lanes.raise_failure()
        if lanes is not None and lanes.full:  # read enough ahead: wait for deliveries to finish
            await lanes.wait_change(self._wait_ms() / 1000)
            batch = {}
        else:
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
                if lanes is not None:
                    for rec in records:
                        lanes.read(tp, rec.offset)
                if len(buffer) >= self.settings.subscription_batch_max:
                    self._consumer.pause(tp)
            else:
                mq_items += [self._mq_item(rec) for rec in records]
                if lanes is None:
                    commit[tp] = records[-1].offset + 1
        due = self._due_rq_items(None if lanes is not None else commit)
        if lanes is None:
            await self._deliver(due + mq_items)
        else:
            for work in due:
                lanes.submit(_read_at(work), work.record.offset, work.ordering_key, work)
            for work in mq_items:
                lanes.take(_read_at(work), work.record.offset, work.ordering_key, work)
            commit.update(self._finished_offsets())
        if commit:
            await self._commit(commit)
            await self._forget_settled()
        self.stats.rq_buffered = sum(len(b) for b in self._rq_buffers.values())

    def _mq_item(self, rec: ConsumerRecord[bytes, bytes]) -> Work:
        return main_work(rec, self.mq.idx, self.settings.max_group_id_bytes)

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

    def _finished_offsets(self) -> dict[TopicPartition, int]:
        """The lanes' committable offsets that are ahead of what the broker took."""
        assert self._lanes is not None
        return {
            tp: offset
            for tp, offset in self._lanes.committable().items()
            if offset > self._committed.get(tp, -1)
        }

    async def _settle_lanes(self) -> None:
        """A stop: everything read is delivered and committed, so the next owner starts where
        this one stopped and repeats nothing (as a stop between two polls did)."""
        if self._lanes is None:
            return
        await self._lanes.drain()
        commit = self._finished_offsets()
        if commit:
            await self._commit(commit)

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        """GroupState changes reach the changelog before the offsets move."""
        assert self._consumer is not None
        self.check_lease()
        await self.states.flush()
        self.check_lease()
        crash_point("subscription.offsets.commit")
        await self._consumer.commit(offsets)
        self._committed.update(offsets)

    async def _commit_positions(self) -> None:
        assert self._consumer is not None
        if self._lanes is not None:  # positions are where reading is: everything read must finish
            await self._lanes.drain()
        offsets: dict[TopicPartition, int] = {}
        for tp in self._consumer.assignment():
            if tp.topic in {t.topic for t in self._rq_buffers if self._rq_buffers[t]}:
                continue
            offsets[tp] = await self._consumer.position(tp)
        if offsets:
            await self._commit(offsets)
        else:
            self.check_lease()
            await self.states.flush()


def _read_at(work: Work) -> TopicPartition:
    """The partition a record was read from (a copy's main partition is another)."""
    return TopicPartition(work.record.topic, work.record.partition)
