"""The intake part of a running copy (`KeyedConsumer`, app.consumer.kafka): fetched records taken
in fetch order into their partitions' offsets and their keys' lanes (a fresh key's record run at
once), and retry copies admitted once due."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError
from confluent_kafka import Message as KafkaMessage

from app.consumer.eager import Suspended, start
from app.consumer.engine import KEY_HEADER, LibraryEngine, Record
from app.consumer.model import ConsumerSettings, Message, record_key
from app.consumer.parts import TP, Item, Lane
from app.consumer.source import Source
from app.consumer.stats import ConsumerStats, Counted
from app.consumer.throttle import Throttle
from app.ordered.errors import UndecodableMessage
from app.ordered.progress import KeyLanes, OffsetTracker
from app.ordered.records import decode_internal, header_map
from app.ordered.retries import take_due
from app.ordered.work import Work

__all__ = ["RecordIntake"]

log = logging.getLogger(__name__)


class RecordIntake:
    """The intake part of `KeyedConsumer` (which sets these attributes)."""

    settings: ConsumerSettings
    member_id: str
    stats: ConsumerStats
    _handler: Counted
    _engine: LibraryEngine
    _source: Source
    _owned: set[int]
    _trackers: dict[TP, OffsetTracker]
    _resumed: dict[TP, frozenset[int]]
    _lanes: KeyLanes[Lane, Item]
    _ready: deque[Item]
    _inbox: deque[list[KafkaMessage]]
    _pulling: Iterator[KafkaMessage]
    _pull_open: bool
    _idle: deque[asyncio.Future[None]]
    _lane_ended: asyncio.Event
    _retry_wait: dict[int, deque[tuple[Work, TP]]]
    _retry_paused: set[int]
    _retry_arrived: asyncio.Event
    _buffered: int
    _admitted: int
    _shares: list[asyncio.Semaphore] | None
    _throttle: Throttle | None

    if TYPE_CHECKING:  # other parts' methods (stubs left at run time would hide them)

        def _may_act(self, partition: int) -> bool: ...
        def _lane_of(self, tp: TP) -> int: ...
        async def _run_lane(
            self, me: asyncio.Task[None], item: Item, first: Suspended | Exception | None = None
        ) -> None: ...

    # -- event loop: records ---------------------------------------------------------------------
    def _admit_batch(self, msgs: list[KafkaMessage]) -> None:
        """A fetched batch, as the poll thread hands it over: workers take its records in order."""
        self._inbox.append(msgs)
        self._pull_open = True
        if self._idle:
            self._wake_one()

    async def _pull(self, me: asyncio.Task[None]) -> None:
        """Take records off the inbox, in fetch order: each is read into its partition's offsets
        and goes to its key's lane. A main record of a key without state whose lane is idle runs
        here at once: a handler call that ends without suspending needs no lane, queue or
        wake-up; one that suspends holds its lane and this worker until it ends. Returns when the
        inbox is empty, or when a lane head waits in `_ready` and no other worker is free."""
        s = self.settings
        retry_topic = s.retry_topic
        eager = (
            s.key_of is record_key and self._shares is None and self._throttle is None and s.filter is None
        )
        owned, trackers, ready, lanes = self._owned, self._trackers, self._ready, self._lanes
        busy = lanes.busy_keys
        stats, handler, engine = self.stats, self._handler.handler, self._engine
        at: TP | None = None
        tracker: OffsetTracker | None = None
        idx = lane_p = 0
        scaled = False  # a storage topic of K > 1 partitions a lane: keys are checked as routed
        while True:
            msg = next(self._pulling, None)
            if msg is None:
                if not self._inbox:
                    self._pull_open = False
                    self._lane_ended.set()
                    return
                batch = self._inbox.popleft()
                self._admitted += len(batch)
                self._pulling = iter(batch)
                # Calls that end without suspending never give the loop back: between batches
                # the loop's callbacks (the next batch, commits, heartbeats) get their turn.
                await asyncio.sleep(0)
                at = None
                continue
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("%s: %s", self.member_id, msg.error())
                continue
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            # A fetch hands over runs of one partition: its tracker, storage index and lane are
            # looked up once per run (and again after this worker waited: a rebalance may have run).
            if at is None or at[1] != partition or at[0] != topic:
                at = (topic, partition)
                tracker = trackers.get(at)
                found = self._source.index_of(topic)
                idx = found or 0
                scaled = found is not None and self._source.k_of(found) > 1
                lane_p = partition // self._source.k_of(found) if scaled and found is not None else partition
            if lane_p not in owned or not self._may_act(lane_p):
                continue  # read before its partition was revoked (or its lease ran out)
            tp = at
            if tracker is None:
                tracker = trackers[tp] = OffsetTracker(offset, self._resumed.pop(tp, ()))
            elif offset < tracker.next_offset:
                continue  # handed over twice (a fetch repeated around a rebalance): taken already
            if not tracker.read(offset):
                stats.skipped += 1  # finished before a crash (the commit's metadata says)
                continue
            if topic == retry_topic:  # counted in the buffer once due: waiting copies must not
                record = _record(msg)  # hold the source back
                self._retry_wait.setdefault(partition, deque()).append((self._retry_work(record), tp))
                self._retry_arrived.set()
                continue
            item: Item
            if scaled and self._misrouted(msg, idx):
                work = self._main_work(_record(msg), idx, lane_p, misrouted=True)
                item = (work, tp, work.lane, idx)
            elif eager:  # the default: the record key alone, no Work until the engine needs one
                key = (msg.key() or b"").decode("utf-8", "replace")
                lane = (lane_p, key)
                message = (
                    None
                    if lane in busy
                    else engine.fresh_main(
                        idx, lane_p, partition, offset, msg.key(), key, msg.value(), msg.headers()
                    )
                )
                if message is not None:
                    stats.attempts += 1
                    stats.in_flight += 1
                    if stats.in_flight > stats.max_in_flight:
                        stats.max_in_flight = stats.in_flight
                    first: Suspended | Exception | None
                    try:
                        first = start(handler(message))
                    except Exception as exc:  # the handler's: retry or DLQ, in its lane
                        first = exc
                    if first is None:
                        stats.in_flight -= 1
                        stats.delivered += 1
                        tracker.finish(offset)
                        continue
                    item = (msg, tp, lane, idx)
                    self._buffered += 1
                    lanes.add(lane, item)
                    if self._idle:  # someone else goes on with the inbox meanwhile
                        self._wake_one()
                    await self._run_lane(me, item, first)
                    at = None
                    continue
                item = (msg, tp, lane, idx)
            else:
                work = self._main_work(_record(msg), idx, lane_p)
                item = (work, tp, work.lane, idx)
            self._buffered += 1
            if lanes.add(item[2], item):
                ready.append(item)
                if not self._idle:
                    return  # nobody else is free: this worker runs it
                self._wake_one()

    def _misrouted(self, msg: KafkaMessage, idx: int) -> bool:
        """A record of a scaled storage topic not where the router puts its key: its lane would
        compare offsets of two partitions, so it goes to the DLQ instead (`_main_work`)."""
        key = (msg.key() or b"").decode("utf-8", "replace")
        return self._source.partition_of_key(idx, key) != int(msg.partition())

    def _main_work(self, record: Record, idx: int, lane_p: int, *, misrouted: bool = False) -> Work:
        if misrouted:
            key = (record.key or b"").decode("utf-8", "replace")
            why = (
                f"{record.topic}[{record.partition}] is not where the composite topic's router puts "
                f"key {key!r}: the key's records in it cannot be ordered with the rest of its lane"
            )
            return Work(record, lane_p, key, undecodable=why, storage_idx=idx)
        if self.settings.key_of is record_key:  # the default: no Message built for the key alone
            key = (record.key or b"").decode("utf-8", "replace")
            return Work(record, lane_p, key, storage_idx=idx)
        probe = Message(
            record.topic,
            record.partition,
            record.offset,
            record.key,
            "",
            record.value,
            header_map(record.headers),
            1,
        )
        try:
            key = self.settings.key_of(probe)
        except Exception as exc:  # a user's key function failing on bad data: the record goes to DLQ
            return Work(record, lane_p, "", undecodable=f"ordering key failed: {exc!r}", storage_idx=idx)
        return Work(record, lane_p, key, storage_idx=idx)

    def _retry_work(self, record: Record) -> Work:
        try:
            meta = decode_internal(record.headers)
        except UndecodableMessage as exc:
            return Work(record, record.partition, "", undecodable=str(exc))
        key = header_map(record.headers).get(KEY_HEADER, b"").decode("utf-8", "replace")
        return Work(record, record.partition, key, meta)

    def _purge_inbox(self, partitions: set[int]) -> None:
        """Drop the records of revoked partitions not taken yet: if a partition comes back, its
        records come again from its commit."""
        lane_of = self._lane_of
        rest = [m for m in self._pulling if lane_of((m.topic(), m.partition())) not in partitions]
        self._pulling = iter(rest)
        kept: deque[list[KafkaMessage]] = deque()
        for batch in self._inbox:
            left = [m for m in batch if lane_of((m.topic(), m.partition())) not in partitions]
            self._admitted += len(batch) - len(left)  # never to be taken: out of the buffer
            kept.append(left)
        self._inbox = kept

    def _admit(self, item: Item) -> None:
        if self._lanes.add(item[2], item):
            self._ready.append(item)
            if self._idle:
                self._wake_one()

    def _wake_one(self) -> None:
        while self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    async def _retry_loop(self) -> None:
        """Admit retry copies whose time has come (`take_due`: a key's copies in the retry
        partition's order, other keys' not held behind them). A partition holding `buffered`
        copies that wait is paused until some are admitted."""
        while True:
            now_ms = time.time() * 1000
            wait_s = 0.2
            for p, waiting in self._retry_wait.items():
                taken = take_due(waiting, now_ms, _work_of)
                for work, tp in taken.due:
                    self._buffered += 1
                    self._admit((work, tp, work.lane, work.storage_idx))
                if taken.due:
                    self._retry_wait[p] = deque(taken.rest)
                if len(taken.rest) >= self.settings.buffered:
                    self._retry_paused.add(p)
                else:
                    self._retry_paused.discard(p)
                if taken.next_due_ms is not None:
                    wait_s = min(wait_s, max(0.0, (taken.next_due_ms - now_ms) / 1000))
            self._retry_arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._retry_arrived.wait(), timeout=wait_s)


def _work_of(waiting: tuple[Work, TP]) -> Work:
    return waiting[0]


def _record(msg: KafkaMessage) -> Record:
    return Record(
        msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), tuple(msg.headers() or ())
    )
