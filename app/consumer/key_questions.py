"""Answering questions about a key (app.consumer.owner): the copy that owns a key's lane reads the
requests partitions of its lanes and replies with its view of the key (`hubstream consumer state`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from app.consumer.inspect import changelog_states
from app.consumer.model import ConsumerSettings, message_id
from app.consumer.owner import InFlight, LaneSet, Request, decode_request, encode_reply, owner_answer
from app.consumer.parts import TP, Item, Lane, OnLoop
from app.consumer.queues import KafkaStateLog
from app.crashpoints import crash_point
from app.errors import HubstreamError
from app.kafka.broker import broker_for
from app.kafka.consuming import partition_reader
from app.kafka.producing import AsyncProducer
from app.ordered.progress import KeyLanes
from app.ordered.rules import GroupState
from app.ordered.work import Work

__all__ = ["KeyQuestions"]

log = logging.getLogger(__name__)


class KeyQuestions(OnLoop):
    """The answering part of `KeyedConsumer` (which sets these attributes)."""

    settings: ConsumerSettings
    member_id: str
    _stop: threading.Event
    _request_lanes: LaneSet
    _answering: set[asyncio.Task[None]]
    _owned: set[int]
    _states: KafkaStateLog
    _retry_wait: dict[int, deque[tuple[Work, TP]]]
    _lanes: KeyLanes[Lane, Item]
    _workers: dict[asyncio.Task[None], Item | None]
    _producer: AsyncProducer

    def _read_requests(self) -> None:
        """Read the requests partitions of the lanes this copy owns (a thread; assigned, not
        subscribed: no group), each from its end when it became ours, and answer on the loop."""
        s = self.settings
        reader = partition_reader(s.bootstrap, f"{s.name}-requests-reader", reset="latest")
        assigned: frozenset[int] = frozenset()
        try:
            while not self._stop.is_set():
                lanes = self._request_lanes.now()
                if lanes != assigned:
                    _reassign(reader, s.requests_topic, assigned, lanes)
                    assigned = lanes
                for msg in reader.consume(100, 0.2):
                    request = decode_request(msg.value()) if msg.error() is None else None
                    if request is None or msg.partition() not in assigned:
                        continue
                    if request.stale(int(time.time() * 1000)) or self._stop.is_set():
                        continue
                    with contextlib.suppress(RuntimeError):  # the loop closed as the copy stopped
                        self._call_in_loop(self._answer_soon, request, msg.partition())
        finally:
            reader.close()

    def _answer_soon(self, request: Request, partition: int) -> None:
        if self._stop.is_set():  # stopping: the helpers are being cancelled
            return
        task = asyncio.create_task(self._answer(request, partition))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer(self, request: Request, partition: int) -> None:
        """Reply with this copy's view of the key in `partition`: its state as held in memory (as
        the changelog has it while the partition's states are still loading), the record of the
        key running now, its records waiting in the lane and its retry copies not due yet."""
        s, key = self.settings, request.key
        lane = (partition, key)
        loaded = partition in self._owned
        try:
            if loaded:
                state = self._states.get(partition, key)
            else:
                found = await asyncio.to_thread(changelog_states, broker_for(s), s.name, key, [partition])
                state = GroupState.from_json(found[partition]["s"]) if partition in found else None
            waiting = self._retry_wait.get(partition, ())
            due = [w.meta.due_ms for w, _ in waiting if w.ordering_key == key and w.meta is not None]
            answer = owner_answer(
                partition,
                self.member_id,
                state,
                from_memory=loaded,
                running=self._running(lane),
                lane_waiting=self._lanes.waiting(lane),
                retry_due_ms=due,
                now_ms=int(time.time() * 1000),
            )
            crash_point("consumer.state.reply")
            reply = encode_reply(request.id, answer)
            await self._producer.send(s.replies_topic, 0, request.id.encode(), reply)
        except HubstreamError as exc:  # the requester falls back to the changelog
            log.info("%s: answer about key %r not written: %s", self.member_id, key, exc)

    def _running(self, lane: Lane) -> InFlight | None:
        """The record of `lane` a worker is on now (its handler call, or the retry/DLQ/state write
        after it); a lane whose head waits for a free worker has none."""
        for on in self._workers.values():
            if on is not None and on[2] == lane:
                return self._in_flight(on)
        return None

    def _in_flight(self, item: Item) -> InFlight:
        head, _tp, (partition, _key), idx = item
        if isinstance(head, Work):
            idx, offset = head.main
            attempt = (head.meta.failed_attempts if head.meta is not None else 0) + 1
        else:
            offset, attempt = int(head.offset()), 1
        topic = self.settings.source_topic(idx)
        return InFlight(topic, offset, attempt, message_id(topic, partition, offset))


def _reassign(reader: Consumer, topic: str, before: frozenset[int], lanes: frozenset[int]) -> None:
    """Assign `lanes` of `topic`: partitions kept go on from where they are, new ones start at
    their end (questions asked before this copy owned a lane were its previous owner's)."""
    kept = [TopicPartition(topic, p) for p in sorted(before & lanes)]
    at = {tp.partition: tp.offset for tp in reader.position(kept)} if kept else {}
    reader.assign(
        [TopicPartition(topic, p, at[p] if at.get(p, -1) >= 0 else OFFSET_END) for p in sorted(lanes)]
    )
