"""The consumer library on the broker: `KeyedConsumer` runs one copy of a consumer.

Kafka assigns the source topic's partitions over the copies (consumer group `<name>`, range
assignment, so retry partition p always goes with source partition p). Records are handed to
per-key lanes: many keys of a partition run at once (up to `concurrency`), one record per key at
a time, in offset order. A partition's offset is committed up to the first record not finished,
and a record is finished only once its key's new state is in `<name>-state`: a copy killed at
any moment redelivers only what it had not finished, and the key states it wrote move with
their partition to the next owner.

One poll thread talks to the Kafka consumer (its rebalance callbacks run there and wait for the
event loop to drain the revoked partitions); everything else runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Coroutine, Iterator
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from app.composite.advance import may_leave
from app.composite.store import MetadataStore
from app.consumer.eager import Suspended, resume, start
from app.consumer.engine import KEY_HEADER, LibraryEngine, Record
from app.consumer.heartbeats import Heartbeats
from app.consumer.key_questions import KeyQuestions
from app.consumer.model import ConsumerSettings, Handler, Message, record_key
from app.consumer.orphans import DlqMark, adopt_copies, copy_at
from app.consumer.owner import LaneSet, key_route
from app.consumer.parts import TP, Commit, Item, Lane
from app.consumer.progress import KeyLanes, OffsetTracker, decode_finished, partition_shares
from app.consumer.queues import KafkaQueues, KafkaStateLog
from app.consumer.source import Source
from app.consumer.stats import ConsumerStats, Counted
from app.consumer.threads import in_own_thread
from app.consumer.throttle import Throttle
from app.consumer.topics import drained_facts, ensure_topics, read_as_named, resolve_source
from app.crashpoints import crash_point
from app.errors import ConfigError, HubstreamError
from app.kafka.broker import FetchGuard, broker_for, confluent_seek
from app.kafka.consuming import group_member
from app.kafka.producing import AsyncProducer
from app.kafka.reading import read_from
from app.ordered.errors import UndecodableMessage
from app.ordered.lease import LaneLost, Lease
from app.ordered.orphans import Copy, Queue
from app.ordered.owner_log import KafkaOwnerLog
from app.ordered.ownership import LaneOwnership
from app.ordered.records import decode_internal, header_map
from app.ordered.retries import take_due
from app.ordered.rules import forgettable, settled
from app.ordered.work import Work

__all__ = ["KeyedConsumer"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class KeyedConsumer(Heartbeats, KeyQuestions):
    def __init__(self, settings: ConsumerSettings, handler: Handler, *, member_id: str | None = None) -> None:
        self.settings = settings
        self.member_id = member_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.stats = ConsumerStats()
        self._handler = Counted(handler, self.stats)
        self._stop = threading.Event()
        self._started_ms = int(time.time() * 1000)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._consumer: Consumer | None = None
        self._guard: FetchGuard | None = None  # checks where each assigned partition starts
        self._owned: set[int] = set()
        self._trackers: dict[TP, OffsetTracker] = {}
        self._committed: dict[TP, Commit] = {}
        self._resumed: dict[TP, frozenset[int]] = {}  # finished above the commit, per its metadata
        self._metadata_missing_logged = False
        self._lanes: KeyLanes[Lane, Item] = KeyLanes()
        self._ready: deque[Item] = deque()  # heads of lanes, for the next free worker
        # Fetched batches not taken yet, and the one being taken (workers share it, in order).
        self._inbox: deque[list[KafkaMessage]] = deque()
        self._pulling: Iterator[KafkaMessage] = iter(())
        self._pull_open = False  # records may be left in the inbox
        self._idle: deque[asyncio.Future[None]] = deque()  # workers waiting for a lane
        self._lane_ended = asyncio.Event()
        self._workers: dict[asyncio.Task[None], Item | None] = {}  # worker -> the record it is on
        self._retry_wait: dict[int, deque[tuple[Work, TP]]] = {}
        self._retry_paused: set[int] = set()
        self._retry_arrived = asyncio.Event()
        self._buffered = 0  # admitted and not finished (event loop)
        self._posted = 0  # handed to the event loop (poll thread only)
        self._admitted = 0  # taken in by the event loop (event loop only)
        self._throttle = Throttle(settings.throttle) if settings.throttle else None
        self._next_start = 0.0
        self.partitions = 0
        self._highs: dict[TP, int] = {}  # high watermarks, as the poll thread last saw them
        # The source; for a composite topic, the storage topic read (every copy moves on by the
        # same rule, on the group's commits) and the topics to subscribe to (every storage topic).
        self._store: MetadataStore | None = None
        self._source = Source.of_topic(settings.topic, 0)
        self.read_idx = 0
        self._switch_seen_at: float | None = None
        self._held_logged = -1
        self._topics: list[str] = [settings.topic, settings.retry_topic]
        # Questions about a key: the lane partitions this copy answers for (handed over by the
        # rebalance callbacks to the request reader) and the answers being written.
        self._request_lanes = LaneSet()
        self._answering: set[asyncio.Task[None]] = set()
        self._key_route = ""
        # Each owned partition's lease (`app.ordered.lease`): nothing of a partition is handled,
        # written or committed once its lease no longer holds.
        self._owner_log = KafkaOwnerLog(
            broker_for(settings),
            settings.owners_topic,
            replication_factor=settings.replication_factor,
            claim_point="consumer.owner.claim",
            release_point="consumer.owner.release",
        )
        self._ownership = LaneOwnership(self._owner_log, self.member_id, settings.lease_s)
        self._leases: dict[int, Lease] = {}

    # -- lifecycle -------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        s = self.settings = await asyncio.to_thread(read_as_named, self.settings)
        self._topics = [s.source, s.retry_topic]
        self._loop = asyncio.get_running_loop()
        if s.composite_topic is not None:
            self._store = MetadataStore(
                broker_for(s), s.metadata_topic, replication_factor=s.replication_factor
            )
            try:
                await self._start_composite(self._store)
            except BaseException:
                await asyncio.to_thread(self._store.close)
                raise
        self.partitions = await asyncio.to_thread(ensure_topics, s, self._source if self._store else None)
        self._key_route = key_route(s.key_of is record_key, self._source)
        if s.global_in_flight is not None and s.global_in_flight < self.partitions:
            raise ConfigError(
                f"global_in_flight={s.global_in_flight} is below the {self.partitions} partitions of "
                f"{s.source}: every partition needs a share of at least 1"
            )
        shares = partition_shares(s.global_in_flight, self.partitions) if s.global_in_flight else None
        self._shares = [asyncio.Semaphore(n) for n in shares] if shares else None
        for _ in range(s.concurrency):
            self._spawn_worker()
        self._producer = AsyncProducer(s.bootstrap, name=s.name)
        self._states = KafkaStateLog(s, self._producer)
        self._states.guard = self._check_lane
        self._engine = LibraryEngine(
            s, self._handler, self._states, KafkaQueues(s, self._producer, self._states)
        )
        consumer = group_member(
            s.bootstrap,
            s.name,
            client_id=self.member_id,
            overrides={
                "partition.assignment.strategy": "range",
                "session.timeout.ms": int(s.session_timeout_s * 1000),
                "heartbeat.interval.ms": max(100, int(s.session_timeout_s * 1000 / 6)),
                "max.poll.interval.ms": int(max(s.session_timeout_s, s.revoke_timeout_s * 2) * 1000),
            },
        )
        self._consumer = consumer
        # Only starts are checked: a source topic may be compacted (the broker's fetch guard).
        self._guard = broker_for(s).fetch_guard(confluent_seek(consumer), compacted=True)
        subscribed = list(self._topics)
        consumer.subscribe(
            subscribed,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        helpers: list[asyncio.Future[Any]] = [
            asyncio.create_task(self._ownership.run()),
            asyncio.create_task(self._retry_loop()),
            asyncio.create_task(self._heartbeat_loop()),
            asyncio.create_task(self._dlq_mark_loop()),
            asyncio.create_task(self._forget_loop()),
        ]
        requests = in_own_thread(self._read_requests, name=f"requests-{self.member_id}")
        if self._store is not None:
            helpers.append(asyncio.create_task(self._source_loop(self._store)))
        if self._throttle is not None:
            helpers.append(in_own_thread(self._read_members, name=f"members-{self.member_id}"))
        poll = in_own_thread(self._poll_loop, consumer, subscribed, name=f"poll-{self.member_id}")
        try:
            await asyncio.shield(poll)
        except asyncio.CancelledError:
            self._stop.set()
            await poll  # the loop serves the revoke drain while the poll thread closes the consumer
            raise
        finally:
            self._stop.set()
            helpers += list(self._workers) + list(self._answering)
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            await asyncio.wait([requests], timeout=5)
            await self._leave()
            await self._producer.close()
            self._ownership.close()
            await asyncio.to_thread(self._owner_log.close)
            if self._store is not None:
                await asyncio.to_thread(self._store.close)

    # -- composite source ------------------------------------------------------------------------
    async def _start_composite(self, store: MetadataStore) -> None:
        """Resolve the composite topic and start past the storage topics the group drained."""
        s = self.settings
        self._source = await asyncio.to_thread(resolve_source, s, store)
        self._topics = [*self._source.topics, s.retry_topic]
        # Producers may still write what a recent switch left: `_follow_source` waits the grace.
        recent = self._source.composite.switched_within(
            int(time.time() * 1000), s.switch_grace_s, s.clock_skew_s
        )
        while not recent and may_leave(self._source.composite, self.read_idx):
            drained = await asyncio.to_thread(drained_facts, s, self._source, self.read_idx)
            idx = self._source.read_index(self.read_idx, drained)
            if idx == self.read_idx:
                break
            self.read_idx = idx
        log.info(
            "%s: reads %s from storage topic %d (%s)",
            self.member_id,
            self._source.name,
            self.read_idx,
            self._source.composite.storage_topics[self.read_idx].name,
        )

    async def _source_loop(self, store: MetadataStore) -> None:
        """Follow the composite topic's definition (new storage topics, the produce pointer) and
        move on to the next storage topic by the rule (`Source.read_index`)."""
        interval = max(0.2, min(1.0, self.settings.switch_grace_s / 2))
        while True:
            try:
                await self._follow_source(store)
            except HubstreamError as exc:
                log.info("%s: composite topic not followed this time: %s", self.member_id, exc)
            await asyncio.sleep(interval)

    async def _follow_source(self, store: MetadataStore) -> None:
        s = self.settings
        assert s.composite_topic is not None
        topic = await asyncio.to_thread(store.get, s.composite_topic)
        source = self._source = Source.of_composite(topic)
        self._topics = [*source.topics, s.retry_topic]  # the poll thread subscribes when it changed
        idx = self.read_idx
        if not may_leave(topic, idx):
            self._switch_seen_at = None
            return
        # Producers that still hold the old definition may write T_idx for a while yet.
        if self._switch_seen_at is None:
            self._switch_seen_at = time.monotonic()
        if time.monotonic() - self._switch_seen_at < s.switch_grace_s:
            return
        drained = await asyncio.to_thread(drained_facts, s, source, idx)
        new = source.read_index(idx, drained)
        if new == idx:
            if source.held(idx) and all(drained[idx].values()) and self._held_logged != idx:
                self._held_logged = idx
                log.warning(
                    "%s: stays at the end of %s: %s routes keys unlike %s (other partitions or K), "
                    "so its records would belong to other lane partitions",
                    self.member_id,
                    topic.storage_topics[idx].name,
                    topic.storage_topics[idx + 1].name,
                    topic.storage_topics[0].name,
                )
            return
        log.info(
            "%s: %s drained by the group, reading %s",
            self.member_id,
            topic.storage_topics[idx].name,
            topic.storage_topics[new].name,
        )
        self.read_idx = new  # the poll thread resumes the new storage topic's partitions
        self._switch_seen_at = None

    async def _leave(self) -> None:
        try:
            await self._producer.send(self.settings.members_topic, 0, self.member_id.encode(), None)
        except HubstreamError as exc:
            log.info("%s: members tombstone not written: %s", self.member_id, exc)

    # -- poll thread -----------------------------------------------------------------------------
    def _poll_loop(self, consumer: Consumer, subscribed: list[str]) -> None:
        loop = self._loop
        assert loop is not None
        flow: tuple[set[TP], set[TP]] = (set(), set())
        highs_at = committed_at = time.monotonic()
        full_since: float | None = None
        try:
            while not self._stop.is_set():
                if self._topics != subscribed:  # a storage topic was added to the composite topic
                    subscribed = list(self._topics)
                    log.info("%s: subscribing to %s", self.member_id, subscribed)
                    consumer.subscribe(
                        subscribed,
                        on_assign=self._on_assign,
                        on_revoke=self._on_revoke,
                        on_lost=self._on_lost,
                    )
                # Read ahead up to `buffered` records. A full buffer first just waits (pausing
                # makes the client drop what it fetched ahead); past a second it pauses, so the
                # poll loop keeps serving the group however long the handlers take.
                full = self._buffered + self._posted - self._admitted >= self.settings.buffered
                full_since = (full_since or time.monotonic()) if full else None
                full_for = 0.0 if full_since is None else time.monotonic() - full_since
                flow = self._apply_flow(consumer, flow, full_for > 1.0)
                if full and full_for <= 1.0:
                    time.sleep(0.002)
                else:
                    msgs = self._guarded().admit(consumer.consume(1000, 0.1))
                    if msgs:
                        self._posted += len(msgs)
                        loop.call_soon_threadsafe(self._admit_batch, msgs)
                if time.monotonic() - highs_at > 1.0:
                    highs_at = time.monotonic()
                    self._highs = _high_watermarks(consumer)
                if time.monotonic() - committed_at >= self.settings.commit_interval_s:
                    committed_at = time.monotonic()
                    self._commit(consumer, self._in_loop(self._to_commit()))
            # Leaving: drain and commit here (close() does not always hand the partitions back
            # through the revoke callback first, and the next owner would redo what finished).
            owned = [(tp.topic, tp.partition) for tp in consumer.assignment()]
            self._commit(consumer, self._in_loop(self._revoke(owned)))
            self._in_loop(self._release(owned))
        finally:
            consumer.close()

    def _apply_flow(
        self, consumer: Consumer, last: tuple[set[TP], set[TP]], full: bool
    ) -> tuple[set[TP], set[TP]]:
        """Pause everything while the buffer is full; retry partitions while their head waits;
        (a composite source) storage partitions not read now. `last`: (owned, paused) as last
        applied. On a new assignment every partition is set again: a partition paused before a
        rebalance can come back still paused."""
        s = self.settings
        owned = {(t.topic, t.partition) for t in consumer.assignment()}
        want = {tp for tp in owned if full or (tp[0] == s.retry_topic and tp[1] in self._retry_paused)}
        if self._store is not None:
            want |= {tp for tp in owned if tp[0] != s.retry_topic and not self._reads(tp)}
        if (owned, want) != last:
            if want:
                consumer.pause([TopicPartition(t, p) for t, p in want])
            if owned - want:
                consumer.resume([TopicPartition(t, p) for t, p in owned - want])
        return owned, want

    def _in_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _reads(self, tp: TP) -> bool:
        """A composite source: is this storage partition read now (the storage topic being read,
        and a lane partition this copy owns)?"""
        return self._source.reads(tp[0], tp[1], self.read_idx, self._owned)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        s = self.settings
        mains = sorted(tp.partition for tp in partitions if tp.topic == self._lane_topic)
        log.info("%s: assigned partitions %s; loading their key states", self.member_id, mains)
        self._request_lanes.add(mains)  # answered from the changelog until their states are loaded
        if self._store is None:
            asked = [TopicPartition(t, p) for t in (s.topic, s.retry_topic) for p in mains]
        else:
            asked = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        committed = consumer.committed(asked, timeout=30) if asked else []
        self._guarded().expect_all(
            TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
            for tp in committed  # (none committed: read from the beginning, auto.offset.reset)
        )
        retry_from = {tp.partition: max(0, tp.offset) for tp in committed if tp.topic == s.retry_topic}
        taken = {
            (tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in committed if tp.offset >= 0
        }
        self._call_in_loop(self._committed.update, taken)  # what a crash would re-read from
        self._in_loop(self._assign(mains, retry_from, self._finished_above(committed)))
        if self._store is not None:
            # Storage partitions not read now are paused before anything of them is fetched.
            consumer.assign(partitions)
            hold = [
                tp
                for tp in partitions
                if tp.topic != s.retry_topic and not self._reads((tp.topic, tp.partition))
            ]
            if hold:
                consumer.pause(hold)

    @property
    def _lane_topic(self) -> str:
        """The topic whose partitions are this copy's lane partitions (key states, retry, DLQ):
        the source topic, or for a composite source the retry topic (range assignment gives the
        copy storage partition p with it wherever p is read)."""
        return self.settings.topic if self._store is None else self.settings.retry_topic

    def _finished_above(self, committed: list[TopicPartition]) -> dict[TP, frozenset[int]]:
        """Offsets a previous owner finished above its commit, from the commit metadata. A broker
        that does not return commit metadata (Tansu 0.6 takes it and returns none) leaves these
        empty: everything from the committed offset is redelivered, as without metadata."""
        found: dict[TP, frozenset[int]] = {}
        for tp in committed:
            if tp.offset < 0:
                continue
            if not tp.metadata and not self._metadata_missing_logged:
                self._metadata_missing_logged = True
                log.info(
                    "%s: %s[%d] committed offset %d came back without metadata: finished offsets "
                    "above commits are not known to this copy (redelivered after a crash)",
                    self.member_id,
                    tp.topic,
                    tp.partition,
                    tp.offset,
                )
            found[(tp.topic, tp.partition)] = decode_finished(tp.offset, tp.metadata)
        return found

    def _guarded(self) -> FetchGuard:
        assert self._guard is not None, "the guard is made with the consumer"
        return self._guard

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._guarded().forget((tp.topic, tp.partition) for tp in partitions)
        log.info("%s: partitions revoked; finishing what was read of them", self.member_id)
        revoked = [(tp.topic, tp.partition) for tp in partitions]
        self._commit(consumer, self._in_loop(self._revoke(revoked)))
        self._in_loop(self._release(revoked))
        self._request_lanes.remove(tp.partition for tp in partitions if tp.topic == self._lane_topic)

    def _commit(self, consumer: Consumer, offsets: dict[TP, Commit]) -> None:
        """Commit on the poll thread only: commits and rebalances then never overlap, and an
        older commit can never land after a newer one."""
        if not offsets:
            return
        try:
            crash_point("consumer.offsets.commit")
            answer = consumer.commit(
                offsets=[TopicPartition(t, p, o, metadata=m) for (t, p), (o, m) in offsets.items()],
                asynchronous=False,
            )
        except (KafkaException, HubstreamError) as exc:
            log.info("%s: commit not taken (a rebalance?; redelivered then): %s", self.member_id, exc)
            return
        refused = {(tp.topic, tp.partition) for tp in answer or () if tp.error is not None}
        if refused:
            log.info("%s: commit of %s refused (redelivered then)", self.member_id, sorted(refused))
        taken = {tp: o for tp, o in offsets.items() if tp not in refused}
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._committed.update, taken)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._guarded().forget((tp.topic, tp.partition) for tp in partitions)
        self._request_lanes.remove(tp.partition for tp in partitions if tp.topic == self._lane_topic)
        self._in_loop(self._revoke([(tp.topic, tp.partition) for tp in partitions]))

    # -- event loop: ownership -------------------------------------------------------------------
    async def _assign(
        self, mains: list[int], retry_from: dict[int, int], resumed: dict[TP, frozenset[int]]
    ) -> None:
        self._resumed.update(resumed)
        claims = await asyncio.gather(
            *(self._ownership.acquire(self._lane(p)) for p in mains), return_exceptions=True
        )
        for p, claim in zip(mains, claims, strict=True):
            if isinstance(claim, Lease):
                self._leases[p] = claim
            elif isinstance(claim, Exception):  # a later claim came first: not this copy's
                log.warning("%s: partition %d not taken: %s", self.member_id, p, claim)
            else:
                raise claim
        await asyncio.to_thread(self._states.load, mains)
        dlq_from = {p: self._states.dlq_from.get(p, 0) for p in mains}
        copies, dlq_ends = await asyncio.to_thread(self._copies, mains, retry_from, dlq_from)
        adopted = 0
        for p, found in copies.items():
            adopted += await adopt_copies(self._states, p, found)
            self._states.dlq_marks[p] = DlqMark(dlq_ends[p])
        if adopted:
            log.warning("%s: recorded %d retry/DLQ copies written before a crash", self.member_id, adopted)
        self._owned.update(mains)
        log.info("%s: owns partitions %s of %s", self.member_id, sorted(self._owned), self.settings.source)

    def _copies(
        self, mains: list[int], retry_from: dict[int, int], dlq_from: dict[int, int]
    ) -> tuple[dict[int, list[Copy]], dict[int, int]]:
        """The retry copies not read yet and the DLQ copies from each partition's DLQ mark
        (blocking); and where each DLQ read ended."""
        s = self.settings
        found: dict[int, list[Copy]] = {p: [] for p in mains}
        dlq_ends = dict(dlq_from)
        plan: list[tuple[Queue, dict[tuple[str, int], int]]] = [
            ("rq", {(s.retry_topic, p): retry_from.get(p, 0) for p in mains}),
            ("dlq", {(s.dlq_topic, p): dlq_from[p] for p in mains}),
        ]
        for queue, starts in plan:
            for msg in read_from(broker_for(s), starts):
                if queue == "dlq":
                    dlq_ends[msg.partition()] = msg.offset() + 1
                copy = copy_at(queue, msg.offset(), msg.headers())
                if copy is not None:
                    found[msg.partition()].append(copy)
        for p in mains:
            log.info(
                "%s: %s[%d] read from the DLQ mark %d to %d",
                self.member_id,
                s.dlq_topic,
                p,
                dlq_from[p],
                dlq_ends[p],
            )
        return found, dlq_ends

    async def _revoke(self, tps: list[TP]) -> dict[TP, Commit]:
        mains = {p for t, p in tps if t == self._lane_topic}
        # Finish what was read of these partitions, the records waiting behind a busy key too:
        # a record left undone holds the commit below every later record that finished, and the
        # next owner would handle those again. Past revoke_timeout_s the rest is abandoned.
        self._purge_inbox(mains)
        deadline = time.monotonic() + self.settings.revoke_timeout_s
        while self._lanes.any_of(mains) and time.monotonic() < deadline:
            self._lane_ended.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lane_ended.wait(), timeout=deadline - time.monotonic())
        self._owned -= mains  # what still waits is dropped; handlers still running are abandoned
        stuck = [task for task, on in self._workers.items() if on is not None and on[2][0] in mains]
        for task in stuck:
            task.cancel()
        if stuck:
            await asyncio.wait(stuck)
            self.stats.abandoned += len(stuck)
            for _ in stuck:
                self._spawn_worker()
        offsets = {}
        for tp in tps:
            tracker = self._trackers.pop(tp, None)
            commit = _commit_of(tracker, self._committed.get(tp)) if tracker is not None else None
            if commit is not None:
                offsets[tp] = commit
            self._committed.pop(tp, None)
            self._resumed.pop(tp, None)
        for p in mains:
            self._retry_wait.pop(p, None)
            self._retry_paused.discard(p)
        await self._write_dlq_marks()  # the next owner's adoption read starts there
        self._states.forget(mains)
        return {tp: o for tp, o in offsets.items() if self._may_act(tp[1])}

    async def _release(self, tps: list[TP]) -> None:
        """Hand back the leases of these lane partitions, once their last commit is in."""
        for p in sorted({p for t, p in tps if t == self._lane_topic}):
            lease = self._leases.pop(p, None)
            if lease is not None:
                try:
                    await self._ownership.release(lease)
                except HubstreamError as exc:  # the next owner then waits one lease
                    log.info("%s: release of partition %d not written: %s", self.member_id, p, exc)

    def _lane(self, partition: int) -> str:
        return f"{self.settings.name}/p{partition}"

    def _check_lane(self, partition: int) -> None:
        if not self._may_act(partition):
            raise LaneLost(f"{self._lane(partition)}: this copy's lease no longer holds")

    def _may_act(self, partition: int) -> bool:
        """Does this copy's lease of `partition` cover an act now? Once it does not, the partition
        is dropped as if revoked: what was read of it is redone by its next owner."""
        lease = self._leases.get(partition)
        if lease is not None and lease.may_act(time.monotonic()):
            return True
        if partition in self._owned:
            self._owned.discard(partition)
            log.warning(
                "%s: lease of partition %d lost; its records are left to the next owner",
                self.member_id,
                partition,
            )
        return False

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
        idx = 0
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
            if partition not in owned or not self._may_act(partition):
                continue  # read before its partition was revoked (or its lease ran out)
            # A fetch hands over runs of one partition: its tracker and storage index are looked
            # up once per run (and again after this worker waited: a rebalance may have run).
            if at is None or at[1] != partition or at[0] != topic:
                at = (topic, partition)
                tracker = trackers.get(at)
                idx = self._source.index_of(topic) or 0
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
            if eager:  # the default: the record key alone, no Work until the engine needs one
                key = (msg.key() or b"").decode("utf-8", "replace")
                lane = (partition, key)
                message = (
                    None
                    if lane in busy
                    else engine.fresh_main(idx, partition, offset, msg.key(), key, msg.value(), msg.headers())
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
                work = self._main_work(_record(msg), idx)
                item = (work, tp, work.lane, idx)
            self._buffered += 1
            if lanes.add(item[2], item):
                ready.append(item)
                if not self._idle:
                    return  # nobody else is free: this worker runs it
                self._wake_one()

    def _main_work(self, record: Record, idx: int) -> Work:
        if self.settings.key_of is record_key:  # the default: no Message built for the key alone
            key = (record.key or b"").decode("utf-8", "replace")
            return Work(record, record.partition, key, storage_idx=idx)
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
            return Work(
                record, record.partition, "", undecodable=f"ordering key failed: {exc!r}", storage_idx=idx
            )
        return Work(record, record.partition, key, storage_idx=idx)

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
        rest = [m for m in self._pulling if m.partition() not in partitions]
        self._pulling = iter(rest)
        kept: deque[list[KafkaMessage]] = deque()
        for batch in self._inbox:
            left = [m for m in batch if m.partition() not in partitions]
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

    def _spawn_worker(self) -> None:
        task = asyncio.create_task(self._worker())
        self._workers[task] = None
        task.add_done_callback(self._workers.pop)

    async def _worker(self) -> None:
        """One of `concurrency` workers: runs a lane whose head waits, else takes records off the
        inbox, else waits."""
        me = asyncio.current_task()
        assert me is not None
        loop = asyncio.get_running_loop()
        while True:
            if self._ready:
                item = self._ready.popleft()
                if self._idle and (self._ready or self._pull_open):
                    self._wake_one()
                await self._run_lane(me, item)
            elif self._pull_open:
                await self._pull(me)
            else:
                waiter: asyncio.Future[None] = loop.create_future()
                self._idle.append(waiter)
                await waiter

    async def _run_lane(
        self, me: asyncio.Task[None], item: Item, first: Suspended | Exception | None = None
    ) -> None:
        """Run a lane from `item`, its head, until the lane is idle. `first`: the head's handler
        call, started already (`_pull`): suspended, to be awaited to its end, or its failure."""
        counted = self._handler
        # Nothing to wait for before a call and nothing to check around it: fresh keys' records
        # run here directly; anything else (or a failure) goes through `_run_one`.
        plain = self._shares is None and self._throttle is None and self.settings.filter is None
        lane = item[2]
        next_item: Item | None = item
        try:
            while next_item is not None:
                item = next_item
                self._workers[me] = item  # what a question about the key is told runs now
                if lane[0] not in self._owned or not self._may_act(lane[0]):
                    self._buffered -= 1 + self._lanes.drop({lane})
                    break
                head = item[0]
                offset = _offset(head)
                if first is not None:  # the head's call, started by `_pull`
                    started, first = first, None
                    if isinstance(started, Exception):
                        counted.leave(True)
                        await self._run_one(item, started)
                    else:
                        await self._call_ends(item, resume(started))
                else:
                    message = self._fresh(item) if plain else None
                    if message is None:
                        await self._run_one(item)
                    else:  # a key without state: the handler without the engine's checks
                        counted.enter()
                        await self._call_ends(item, counted.handler(message))
                self._buffered -= 1
                tracker = self._trackers.get(item[1])
                if tracker is not None:
                    tracker.finish(offset)
                next_item = self._lanes.done(lane)
        except asyncio.CancelledError:
            self._buffered -= 1 + self._lanes.drop({lane})
            raise
        finally:
            self._workers[me] = None
            self._lane_ended.set()

    async def _call_ends(self, item: Item, call: Awaitable[None]) -> None:
        """A counted handler call on a key without state: delivered, or its failure to the engine."""
        try:
            await call
        except Exception as exc:  # the handler's: retry or DLQ
            self._handler.leave(True)
            await self._run_one(item, exc)
        else:
            self._handler.leave(False)
            self.stats.delivered += 1

    def _fresh(self, item: Item) -> Message | None:
        """The message to hand the handler straight away: its key has no state (`LibraryEngine.fresh`)."""
        head, _, lane, idx = item
        if isinstance(head, Work):
            return self._engine.fresh(head)
        return self._engine.fresh_main(
            idx, lane[0], head.offset(), head.key(), lane[1], head.value(), head.headers()
        )

    async def _run_one(self, item: Item, failed: Exception | None = None) -> None:
        """Run the record through the engine (or, for a fresh key, the handler directly);
        `failed`: the handler already failed on it, hand that to the engine."""
        head, tp, lane, idx = item
        partition = lane[0]
        share = self._shares[partition] if self._shares is not None else None
        delay = 0.05
        while True:
            if share is not None:
                await share.acquire()
            try:
                if self._throttle is not None:
                    await self._gate()
                engine = self._engine
                if failed is not None:
                    if not isinstance(head, Work):
                        head = Work(_record(head), partition, lane[1], storage_idx=idx)
                    self.stats.count(await engine.failed(head, failed))
                    return
                message = self._fresh((head, tp, lane, idx))
                if message is None:
                    if not isinstance(head, Work):
                        head = Work(_record(head), partition, lane[1], storage_idx=idx)
                    self.stats.count(await engine.run(head))
                    return
                # A key without state: the handler directly, without the engine's rule checks
                # and state writes (none would change anything); a failure goes to the engine.
                keep = self.settings.filter
                try:
                    if keep is not None and not keep(message):
                        self.stats.filtered += 1
                        return
                    await self._handler(message)
                except Exception as exc:  # the handler's (or filter's): retry or DLQ
                    if not isinstance(head, Work):
                        head = Work(_record(head), partition, lane[1], storage_idx=idx)
                    self.stats.count(await engine.failed(head, exc))
                    return
                self.stats.delivered += 1
                return
            except Exception as exc:  # a retry/DLQ/state write failed: the same record again
                self.stats.write_failures += 1
                log.warning("%s: %s[%d]@%d: %r; trying again", self.member_id, *tp, _offset(head), exc)
            finally:
                if share is not None:
                    share.release()
            if partition not in self._owned:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _gate(self) -> None:
        """While the group's failure rate is above the policy's, space this copy's starts out."""
        throttle = self._throttle
        if throttle is None or not throttle.active(time.time()):
            return
        spacing = throttle.copies() / throttle.policy.throttled_per_s
        now = time.monotonic()
        start = max(now, self._next_start)
        self._next_start = start + spacing
        if start > now:
            await asyncio.sleep(start - now)

    # -- event loop: periodic --------------------------------------------------------------------
    async def _forget_loop(self) -> None:
        """A key that failed once does not keep its state for ever: after each commit interval,
        the states `forgettable` says decide nothing any more are dropped."""
        while True:
            await asyncio.sleep(self.settings.commit_interval_s)
            try:
                await self._forget_settled()
            except HubstreamError as exc:  # the tombstone was not written; tried again next time
                log.info("%s: a settled key state not forgotten: %s", self.member_id, exc)

    async def _forget_settled(self) -> None:
        """Drop the settled states of idle keys, judged against the offsets the broker took (a
        crash re-reads MQ and RQ from there, nothing below)."""
        busy = self._lanes.busy_keys
        for p in list(self._owned):
            retry = self._committed.get((self.settings.retry_topic, p))
            rq_from = (0, retry[0]) if retry is not None else None
            for key in self._states.to_check(p):
                state = self._states.get(p, key)  # now: an earlier drop awaited its tombstone
                if p not in self._owned or (p, key) in busy or not self._may_act(p):
                    continue
                if state is None or not settled(state):
                    self._states.checked(p, key)  # until its next write
                    continue
                idx = state.handled[0] if state.handled is not None else self.read_idx
                main = self._committed.get((self.settings.source_topic(idx), p))
                if main is None:
                    continue
                if forgettable(state, (idx, main[0]), rq_from):
                    await self._states.drop(p, key)
                    self.stats.forgotten += 1

    async def _to_commit(self) -> dict[TP, Commit]:
        out = {}
        for tp, tracker in self._trackers.items():
            owned = tp[1] in self._owned and self._may_act(tp[1])
            commit = _commit_of(tracker, self._committed.get(tp)) if owned else None
            if commit is not None:
                out[tp] = commit
        return out


def _commit_of(tracker: OffsetTracker, last: Commit | None) -> Commit | None:
    """What to commit now: the committable offset with the finished offsets above it, when the
    offset moved or more finished above it (a slow head holds the offset while others finish)."""
    commit = (tracker.committable, tracker.progress())
    if last is not None and (commit[0] < last[0] or commit == last):
        return None
    return commit


def _high_watermarks(consumer: Consumer) -> dict[TP, int]:
    """Cached high watermarks of the assigned partitions (poll thread only: consumer calls from
    the event loop could wait on a rebalance callback that waits on the loop)."""
    highs = {}
    for tp in consumer.assignment():
        try:
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
        except KafkaException:
            continue
        if high >= 0:
            highs[(tp.topic, tp.partition)] = high
    return highs


def _work_of(waiting: tuple[Work, TP]) -> Work:
    return waiting[0]


def _record(msg: KafkaMessage) -> Record:
    return Record(
        msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), tuple(msg.headers() or ())
    )


def _offset(head: Work | KafkaMessage) -> int:
    return head.record.offset if isinstance(head, Work) else int(head.offset())
