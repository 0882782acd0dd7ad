"""A copy's heartbeats on the members topic (what `hubstream consumer members` shows, and what the
throttle of every copy counts), its DLQ marks, and its reading of the other copies' heartbeats."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time

from confluent_kafka import OFFSET_END, TopicPartition

from app.consumer.members import Member, decode_member
from app.consumer.model import ConsumerSettings
from app.consumer.parts import TP, OnLoop
from app.consumer.queues import KafkaStateLog
from app.consumer.stats import ConsumerStats
from app.consumer.throttle import Sample, Throttle
from app.errors import HubstreamError
from app.kafka.consuming import partition_reader
from app.kafka.producing import AsyncProducer
from app.ordered.progress import OffsetTracker

__all__ = ["Heartbeats"]

log = logging.getLogger(__name__)


class Heartbeats(OnLoop):
    """The heartbeat part of `KeyedConsumer` (which sets these attributes)."""

    settings: ConsumerSettings
    member_id: str
    stats: ConsumerStats
    _stop: threading.Event
    _started_ms: int
    _trackers: dict[TP, OffsetTracker]
    _highs: dict[TP, int]
    _owned: set[int]
    _buffered: int
    _throttle: Throttle | None
    _key_route: str
    _states: KafkaStateLog
    _producer: AsyncProducer

    def heartbeat(self) -> Member:
        lag = 0
        for tp, tracker in list(self._trackers.items()):
            lag += max(0, self._highs.get(tp, 0) - tracker.committable)
        st = self.stats
        return Member(
            member=self.member_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_ms=self._started_ms,
            at_ms=int(time.time() * 1000),
            heartbeat_s=self.settings.heartbeat_s,
            partitions=sorted(self._owned),
            in_flight=st.in_flight,
            buffered=self._buffered,
            attempts=st.attempts,
            failures=st.failures,
            delivered=st.delivered,
            dead_lettered=st.dead_lettered,
            lag=lag,
            throttled=self._throttle is not None and self._throttle.active(time.time()),
            key_route=self._key_route,
        )

    async def _write_dlq_marks(self) -> None:
        try:
            await self._states.write_dlq_marks()
        except HubstreamError as exc:
            log.info(
                "%s: DLQ mark not written (the next owner reads more of the DLQ): %s", self.member_id, exc
            )

    async def _dlq_mark_loop(self) -> None:
        """Apart from the heartbeats: a slow mark write must not make a live copy look gone."""
        while True:
            await self._write_dlq_marks()
            await asyncio.sleep(self.settings.heartbeat_s)

    async def _heartbeat_loop(self) -> None:
        while True:
            member = self.heartbeat()
            if self._throttle is not None:
                self._throttle.observe(
                    member.member, Sample(member.at_ms / 1000, member.attempts, member.failures)
                )
            try:
                await self._producer.send(
                    self.settings.members_topic, 0, self.member_id.encode(), member.encode()
                )
            except HubstreamError as exc:
                log.info("%s: heartbeat not written: %s", self.member_id, exc)
            await asyncio.sleep(self.settings.heartbeat_s)

    def _read_members(self) -> None:
        """Other copies' heartbeats, for the throttle (a thread: the members partition from its end)."""
        reader = partition_reader(self.settings.bootstrap, f"{self.settings.name}-members-reader")
        try:
            reader.assign([TopicPartition(self.settings.members_topic, 0, OFFSET_END)])
            while not self._stop.is_set():
                msg = reader.poll(0.2)
                if msg is None or msg.error() is not None or self._throttle is None:
                    continue
                key = (msg.key() or b"").decode("utf-8", "replace")
                value = msg.value()
                member = decode_member(value) if value is not None else None
                if member is None:
                    self._call_in_loop(self._throttle.forget, key)
                elif member.member != self.member_id:
                    sample = Sample(member.at_ms / 1000, member.attempts, member.failures)
                    self._call_in_loop(self._throttle.observe, member.member, sample)
        finally:
            reader.close()
