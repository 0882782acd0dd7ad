"""The consumer library on the broker: `KeyedConsumer` runs one copy of a consumer.

Kafka assigns the source topic's partitions over the copies (consumer group `<name>`, range
assignment, so retry partition p always goes with source partition p; a composite source's
group assigns the retry partitions, its lanes, and the storage partitions follow them). Records are handed to
per-key lanes: many keys of a partition run at once (up to `concurrency`), one record per key at
a time, in offset order. A partition's offset is committed up to the first record not finished,
and a record is finished only once its key's new state is in `<name>-state`: a copy killed at
any moment redelivers only what it had not finished, and the key states it wrote move with
their partition to the next owner.

One poll thread talks to the Kafka consumer (its rebalance callbacks run there and wait for the
event loop to drain the revoked partitions); everything else runs on the event loop.

The copy's parts, each a class it inherits: its poll thread (app.consumer.polling), the
partitions it owns (app.consumer.partition_ownership), the intake of records into lanes
(app.consumer.intake), the workers that run the lanes (app.consumer.lane_workers), what it does
each commit interval (app.consumer.periodic), a composite source's storage topics
(app.consumer.following), its heartbeats and its answers about keys.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import Message as KafkaMessage

from app.composite.store import MetadataStore
from app.consumer.engine import LibraryEngine
from app.consumer.following import CompositeFollowing
from app.consumer.heartbeats import Heartbeats
from app.consumer.intake import RecordIntake
from app.consumer.key_questions import KeyQuestions
from app.consumer.lane_workers import LaneWorkers
from app.consumer.model import ConsumerSettings, Handler, record_key
from app.consumer.owner import LaneSet, key_route
from app.consumer.partition_ownership import PartitionOwnership
from app.consumer.parts import TP, Commit, Item, Lane
from app.consumer.periodic import PeriodicWork
from app.consumer.polling import PollThread
from app.consumer.queues import KafkaQueues, KafkaStateLog
from app.consumer.source import Source
from app.consumer.stats import ConsumerStats, Counted, StatsCollector
from app.consumer.threads import in_own_thread
from app.consumer.throttle import Throttle
from app.consumer.topics import ensure_topics, read_as_named
from app.errors import ConfigError, HubstreamError
from app.kafka.broker import FetchGuard, broker_for, confluent_seek
from app.kafka.consuming import group_member
from app.kafka.producing import AsyncProducer
from app.observability import metrics
from app.ordered.lease import Lease
from app.ordered.owner_log import KafkaOwnerLog
from app.ordered.ownership import LaneOwnership
from app.ordered.progress import KeyLanes, OffsetTracker, partition_shares
from app.ordered.work import Work

__all__ = ["KeyedConsumer"]

log = logging.getLogger(__name__)


class KeyedConsumer(
    PollThread,
    PartitionOwnership,
    RecordIntake,
    LaneWorkers,
    PeriodicWork,
    CompositeFollowing,
    Heartbeats,
    KeyQuestions,
):
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
        # A composite source's storage partitions of the lanes, read by a second consumer.
        self._reader: Consumer | None = None
        self._reader_guard: FetchGuard | None = None
        self._reader_idx = 0
        self._reader_lanes: set[int] = set()
        # Questions about a key: the lane partitions this copy answers for (handed over by the
        # rebalance callbacks to the request reader) and the answers being written.
        self._request_lanes = LaneSet()
        self._revoking: set[TP] = set()  # (poll thread) revoked, not yet assigned again
        self._flow_reset = False  # (poll thread) a new assignment: pauses to be set again
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
        if self._store is not None:
            self._open_reader()
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
        stop_metrics = (
            metrics.serve(s.metrics_port, s.metrics_host, StatsCollector(s.name, self.stats))
            if s.metrics_port is not None
            else None
        )
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
            if stop_metrics is not None:
                await asyncio.to_thread(stop_metrics)

    async def _leave(self) -> None:
        try:
            await self._producer.send(self.settings.members_topic, 0, self.member_id.encode(), None)
        except HubstreamError as exc:
            log.info("%s: members tombstone not written: %s", self.member_id, exc)
