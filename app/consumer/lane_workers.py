"""The worker part of a running copy (`KeyedConsumer`, app.consumer.kafka): its `concurrency`
workers, each running one lane at a time, its records in order through the engine (or a fresh
key's straight to the handler), within the partition's share and the throttle."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from confluent_kafka import Message as KafkaMessage

from app.consumer.eager import Suspended, resume
from app.consumer.engine import LibraryEngine
from app.consumer.intake import _record
from app.consumer.model import ConsumerSettings, Message
from app.consumer.parts import TP, Item, Lane
from app.consumer.stats import ConsumerStats, Counted
from app.consumer.throttle import Throttle
from app.ordered.progress import KeyLanes, OffsetTracker
from app.ordered.work import Work

__all__ = ["LaneWorkers"]

log = logging.getLogger(__name__)


class LaneWorkers:
    """The worker part of `KeyedConsumer` (which sets these attributes)."""

    settings: ConsumerSettings
    member_id: str
    stats: ConsumerStats
    _handler: Counted
    _engine: LibraryEngine
    _owned: set[int]
    _trackers: dict[TP, OffsetTracker]
    _lanes: KeyLanes[Lane, Item]
    _ready: deque[Item]
    _pull_open: bool
    _idle: deque[asyncio.Future[None]]
    _lane_ended: asyncio.Event
    _workers: dict[asyncio.Task[None], Item | None]
    _buffered: int
    _next_start: float
    _shares: list[asyncio.Semaphore] | None
    _throttle: Throttle | None

    if TYPE_CHECKING:  # other parts' methods (stubs left at run time would hide them)

        def _may_act(self, partition: int) -> bool: ...
        async def _pull(self, me: asyncio.Task[None]) -> None: ...
        def _wake_one(self) -> None: ...

    # -- event loop: workers -----------------------------------------------------------------------
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
            idx, lane[0], head.partition(), head.offset(), head.key(), lane[1], head.value(), head.headers()
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


def _offset(head: Work | KafkaMessage) -> int:
    return head.record.offset if isinstance(head, Work) else int(head.offset())
