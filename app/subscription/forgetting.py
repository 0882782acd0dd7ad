"""A shard forgets the states of groups that recovered: after each commit, every state
`forgettable` allows is dropped, judged against the offsets the broker took."""

from __future__ import annotations

import asyncio
import time

from aiokafka import TopicPartition

from app.composite.model import CompositeTopic
from app.composite.routing import partition_for
from app.ordered.rules import Position, forgettable, settled
from app.subscription.chain import ChainReader, ShardChain

__all__ = ["ShardForgetting"]


class ShardForgetting(ShardChain):
    """The forgetting part of `ShardRunner` (which sets these attributes)."""

    _fed_below: tuple[int, list[int]] | None
    _feed_over_seen_at: float | None

    # -- settled states ---------------------------------------------------------------------------
    async def _forget_settled(self) -> None:
        """A group that failed once does not keep its state for ever: after each commit, the states
        `forgettable` says decide nothing any more are dropped, judged against the committed
        offsets (a crash reads MQ and RQ again from there, nothing below). Between steps nothing
        of the shard is in flight but what its lanes run: a group with work there is judged after a
        later commit. Not while old RQ partitions are fed (their copies' marks move)."""
        if self._feed_all:
            return
        mq, rq = self._topic(self.mq), self._topic(self.rq)
        gone: list[str] = []
        for group in self.states.to_check():
            if self._lanes is not None and self._lanes.busy(group):
                continue  # its state moves: judged again after a later commit
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

    def _resumes_at(
        self, topic: CompositeTopic, reader: ChainReader, group: str, idx: int
    ) -> Position | None:
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
