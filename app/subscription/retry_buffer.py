"""The retry part of a shard (`ShardRunner`, which sets these attributes): the RQ copies it read,
buffered until their time comes, and taken per group in RQ order so that no group waits behind
another's backoff."""

from __future__ import annotations

import time
from collections import deque

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from app.ordered.retries import take_due
from app.ordered.work import Work
from app.settings import Settings
from app.subscription.chain import ChainReader
from app.subscription.delivery import rq_work
from app.subscription.orphans import fed_place

__all__ = ["ShardRetryBuffer"]


class ShardRetryBuffer:
    settings: Settings
    rq: ChainReader
    _consumer: AIOKafkaConsumer | None
    _rq_buffers: dict[TopicPartition, deque[Work]]
    _rq_read: dict[TopicPartition, int]  # the offset after the last RQ copy read
    _rq_next_due_ms: float | None  # when the soonest waiting RQ copy comes due

    def _wait_ms(self) -> int:
        if self._rq_next_due_ms is None:
            return 200
        return int(max(0, min(200, self._rq_next_due_ms - time.time() * 1000)))

    def _due_rq_items(self, commit: dict[TopicPartition, int] | None) -> list[Work]:
        """The RQ copies whose time has come (`take_due`: per group in RQ order, no group held
        behind another's backoff). A partition's commit stops at its first copy still waiting
        (`commit` None: the lanes track what is finished)."""
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
            if commit is not None:
                commit[tp] = taken.rest[0].record.offset if taken.rest else self._rq_read[tp]
            if len(taken.rest) < self.settings.subscription_batch_max and tp in self._consumer.paused():
                self._consumer.resume(tp)
        self._rq_next_due_ms = next_due_ms
        return out

    def _rq_item(self, rec: ConsumerRecord[bytes, bytes]) -> Work:
        return rq_work(rec, self.rq.idx, self.settings.max_group_id_bytes, fed_place(rec.headers))


def _itself(work: Work) -> Work:
    return work
