"""The poll-thread part of a running copy (`KeyedConsumer`, app.consumer.kafka): the one thread
that talks to the Kafka consumer (fetches, pauses, commits), and the rebalance callbacks it runs,
which wait for the event loop to take over or drain the partitions."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from app.composite.store import MetadataStore
from app.consumer.model import ConsumerSettings
from app.consumer.owner import LaneSet
from app.consumer.parts import TP, Commit, OnLoop
from app.consumer.source import Source
from app.consumer.storage_reading import StorageReading
from app.crashpoints import crash_point
from app.errors import HubstreamError
from app.kafka.broker import FetchGuard
from app.ordered.progress import OffsetTracker, decode_finished

__all__ = ["PollThread"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class PollThread(OnLoop, StorageReading):
    """The poll-thread part of `KeyedConsumer` (which sets these attributes)."""

    settings: ConsumerSettings
    member_id: str
    _stop: threading.Event
    _guard: FetchGuard | None
    _owned: set[int]
    _committed: dict[TP, Commit]
    _metadata_missing_logged: bool
    _retry_paused: set[int]
    _buffered: int
    _posted: int
    _admitted: int
    _highs: dict[TP, int]
    _store: MetadataStore | None
    _source: Source
    read_idx: int
    _topics: list[str]
    _request_lanes: LaneSet
    _revoking: set[TP]  # revoked by a rebalance, not yet assigned again or handed back
    _flow_reset: bool
    _trackers: dict[TP, OffsetTracker]

    if TYPE_CHECKING:  # other parts' methods (stubs left at run time would hide them)

        def _admit_batch(self, msgs: list[KafkaMessage]) -> None: ...
        async def _assign(
            self, mains: list[int], retry_from: dict[int, int], resumed: dict[TP, frozenset[int]]
        ) -> None: ...
        async def _revoke(self, tps: list[TP]) -> dict[TP, Commit]: ...
        async def _release(self, tps: list[TP]) -> None: ...
        async def _claim_partitions(self, mains: list[int]) -> None: ...
        async def _to_commit(self) -> dict[TP, Commit]: ...

    # -- poll thread -----------------------------------------------------------------------------
    def _poll_loop(self, consumer: Consumer, subscribed: list[str]) -> None:
        loop = self._loop
        assert loop is not None
        flow: tuple[set[TP], set[TP]] = (set(), set())
        highs_at = committed_at = time.monotonic()
        full_since: float | None = None
        try:
            while not self._stop.is_set():
                if self._flow_reset:
                    self._flow_reset, flow = False, (set(), set())
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
                self._reader_follow(consumer)
                flow = self._apply_flow(consumer, flow, full_for > 1.0)
                if full and full_for <= 1.0:
                    time.sleep(0.002)
                else:
                    msgs = self._reader_consume(0.05)
                    msgs += self._guarded().admit(consumer.consume(1000, 0 if msgs else 0.05))
                    if msgs:
                        self._posted += len(msgs)
                        loop.call_soon_threadsafe(self._admit_batch, msgs)
                if time.monotonic() - highs_at > 1.0:
                    highs_at = time.monotonic()
                    self._highs = _high_watermarks(consumer) | _high_watermarks(self._reader)
                if time.monotonic() - committed_at >= self.settings.commit_interval_s:
                    committed_at = time.monotonic()
                    self._commit(consumer, self._in_loop(self._to_commit()))
            # Leaving: drain and commit here (close() does not always hand the partitions back
            # through the revoke callback first, and the next owner would redo what finished).
            assigned = [*consumer.assignment(), *self._reader_assignment()]
            owned = sorted({(tp.topic, tp.partition) for tp in assigned} | self._revoking)
            self._commit(consumer, self._in_loop(self._revoke(owned)))
            self._in_loop(self._release(owned))
        finally:
            self._close_reader()
            consumer.close()

    def _apply_flow(
        self, consumer: Consumer, last: tuple[set[TP], set[TP]], full: bool
    ) -> tuple[set[TP], set[TP]]:
        """Pause everything while the buffer is full, and retry partitions while their head
        waits. `last`: (owned, paused) as last applied. On a new assignment every partition is
        set again: a partition paused before a rebalance can come back still paused."""
        s = self.settings
        group = {(t.topic, t.partition) for t in consumer.assignment()}
        storage = {(t.topic, t.partition) for t in self._reader_assignment()}
        owned = group | storage
        want = {tp for tp in owned if full or (tp[0] == s.retry_topic and tp[1] in self._retry_paused)}
        if (owned, want) != last:
            for client, mine in ((consumer, group), (self._reader, storage)):
                if client is None:
                    continue
                if want & mine:
                    client.pause([TopicPartition(t, p) for t, p in want & mine])
                if mine - want:
                    client.resume([TopicPartition(t, p) for t, p in mine - want])
        return owned, want

    def _in_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The group's new assignment. Of the partitions the rebalance revoked (all of them: range
        assignment is eager), those assigned again go on where this copy's reading is, their
        lanes, key states and leases untouched; those not are drained and handed back now; new
        ones are taken over from their committed offsets."""
        s = self.settings
        now = {(tp.topic, tp.partition) for tp in partitions}
        kept = {tp for tp in self._revoking if tp in now}
        moved = sorted(tp for tp in self._revoking if tp not in now)
        self._revoking = set()
        if moved:
            log.info("%s: partitions %s moved; finishing what was read of them", self.member_id, moved)
            moved += self._reader_drop([p for t, p in moved if t == self._lane_topic])
            self._commit(consumer, self._in_loop(self._revoke(moved)))
            self._in_loop(self._release(moved))
            self._request_lanes.remove(p for t, p in moved if t == self._lane_topic)
        fresh = [tp for tp in partitions if (tp.topic, tp.partition) not in kept]
        fresh_tps = [(tp.topic, tp.partition) for tp in fresh]
        mains = sorted(tp.partition for tp in fresh if tp.topic == self._lane_topic)
        if kept:
            log.info("%s: keeps partitions %s through the rebalance", self.member_id, sorted(kept))
        if mains:
            log.info("%s: assigned partitions %s; loading their key states", self.member_id, mains)
        self._request_lanes.add(mains)  # answered from the changelog until their states are loaded
        if mains:
            self._in_loop(self._claim_partitions(mains))
        if self._store is None:
            asked = [TopicPartition(t, p) for t in (s.topic, s.retry_topic) for p in mains]
        else:  # the lanes' retry partitions, and their partitions of the storage topic read
            asked = [TopicPartition(t, p) for t, p in [*fresh_tps, *self._storage_tps(mains)]]
        committed = consumer.committed(asked, timeout=30) if asked else []
        # Where the kept partitions' reading is: after every record already handed to the loop.
        positions = self._in_loop(self._read_positions(kept))
        self._guarded().expect_all(
            [
                TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                for tp in committed  # (none committed: read from the beginning, auto.offset.reset)
            ]
            + [TopicPartition(t, p, offset) for (t, p), offset in positions.items()]
        )
        retry_from = {tp.partition: max(0, tp.offset) for tp in committed if tp.topic == s.retry_topic}
        taken = {
            (tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in committed if tp.offset >= 0
        }
        self._call_in_loop(self._committed.update, taken)  # what a crash would re-read from
        if mains:
            self._in_loop(self._assign(mains, retry_from, self._finished_above(committed)))
        consumer.assign(
            [
                TopicPartition(tp.topic, tp.partition, positions[(tp.topic, tp.partition)])
                if (tp.topic, tp.partition) in positions
                else TopicPartition(tp.topic, tp.partition)
                for tp in partitions
            ]
        )
        if self._store is not None and mains:
            storage = {(tp.topic, tp.partition): tp.offset for tp in committed if tp.topic != s.retry_topic}
            self._reader_take(mains, storage)
        self._flow_reset = True  # pauses are set again for the whole assignment

    async def _read_positions(self, tps: set[TP]) -> dict[TP, int]:
        """The offset after the last record read of each of `tps` (a partition this copy read
        nothing of yet is left out: it starts from its committed offset)."""
        return {tp: self._trackers[tp].next_offset for tp in tps if tp in self._trackers}

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
        """A rebalance began. Commit what finished; which partitions really leave this copy is
        known only from the new assignment (`_on_assign`), so nothing is drained here. While the
        group rebalances the handlers go on; the leases keep two copies from acting for one
        partition whatever the timing."""
        revoked = [(tp.topic, tp.partition) for tp in partitions]
        self._guarded().forget(revoked)
        self._commit(consumer, self._in_loop(self._to_commit()))
        self._revoking |= set(revoked)

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
        self._revoking -= {(tp.topic, tp.partition) for tp in partitions}
        self._guarded().forget((tp.topic, tp.partition) for tp in partitions)
        lanes = [tp.partition for tp in partitions if tp.topic == self._lane_topic]
        self._request_lanes.remove(lanes)
        lost = [(tp.topic, tp.partition) for tp in partitions] + self._reader_drop(lanes)
        self._in_loop(self._revoke(lost))


def _high_watermarks(consumer: Consumer | None) -> dict[TP, int]:
    """Cached high watermarks of the assigned partitions (poll thread only: consumer calls from
    the event loop could wait on a rebalance callback that waits on the loop)."""
    highs: dict[TP, int] = {}
    if consumer is None:
        return highs
    for tp in consumer.assignment():
        try:
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
        except KafkaException:
            continue
        if high >= 0:
            highs[(tp.topic, tp.partition)] = high
    return highs
