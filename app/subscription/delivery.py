"""A shard's host of the ordered-delivery engine (`app.ordered.engine`): the records a shard read
as the engine's work, the message an endpoint receives, RQ/DLQ copies through the shard's
producers, and the shard's counters.

`Delivery.process` takes the records of one poll in read order (due RQ records first, then MQ).
Per-message endpoints get one message at a time per group (groups run concurrently for HTTP);
batch sinks get whole batches (see `app.subscription.batch`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.composite.producer import RecordRefused
from app.ordered.engine import Engine, Outcome
from app.ordered.errors import CopyRefused, UndecodableMessage
from app.ordered.orphans import Queue
from app.ordered.records import (
    InternalMeta,
    decode_group_id,
    decode_internal,
    header_map,
    message_id_for,
    user_headers,
)
from app.ordered.rules import GroupState, Position
from app.ordered.work import SourceRecord, Work
from app.settings import Settings
from app.subscription.endpoints import Endpoint
from app.subscription.model import Subscription
from app.subscription.records import SubscriptionMessage

__all__ = [
    "UNDECODABLE_GROUP",
    "Delivery",
    "ProduceTo",
    "ShardStates",
    "ShardStats",
    "main_work",
    "rq_work",
    "run_together",
]

log = logging.getLogger(__name__)
UNDECODABLE_GROUP = "__undecodable__"


class ShardStates(Protocol):
    """The shard's GroupStates (read and written only by the shard that owns them)."""

    def get(self, group_id: str) -> GroupState | None: ...
    def put(self, group_id: str, state: GroupState) -> None: ...
    async def flush(self) -> None: ...

    def to_check(self) -> list[str]:
        """The groups whose state may have become forgettable: written or loaded since `checked`."""
        ...

    def checked(self, group_id: str) -> None:
        """The group's state cannot be forgotten until it is written again."""
        ...

    async def forget(self, group_ids: Sequence[str]) -> None:
        """Drop these groups' states (`app.ordered.rules.forgettable` holds for each)."""
        ...


# (queue, group id, source record, the copy's headers) -> where the broker confirmed it
ProduceTo = Callable[[Queue, str, SourceRecord, Sequence[tuple[str, bytes]]], Awaitable[Position]]


@dataclass
class ShardStats:
    delivered: int = 0
    sidelined: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    failures: int = 0
    batches: int = 0
    fed: int = 0  # old RQ records re-produced after a shard-count change
    adopted: int = 0  # RQ/DLQ copies written before a crash whose state write had not landed
    forgotten: int = 0  # states dropped once they decided nothing any more (the group recovered)
    mq_storage_idx: int = 0
    rq_storage_idx: int = 0
    rq_buffered: int = 0
    mq_held_at: int | None = None  # MQ storage topic whose end the shard waits at (groups change shards next)
    # Records that landed in MQ storage topics before the one read after this shard left them (a
    # producer that held the old definition past the switch grace, or retried that long): not
    # delivered. Counted and logged, never silent (`ShardChain._check_late`).
    late_records: int = 0

    def count(self, outcome: Outcome) -> None:
        if outcome in (Outcome.DELIVERED, Outcome.FILTERED):
            self.delivered += 1
        elif outcome in (Outcome.RETRYING, Outcome.SIDELINED):
            self.sidelined += 1
        elif outcome is Outcome.DEAD_LETTERED:
            self.dead_lettered += 1
        else:
            self.skipped += 1


def main_work(rec: SourceRecord, storage_idx: int, max_group_id_bytes: int) -> Work:
    """A record read from MQ storage topic `storage_idx`."""
    try:
        group, why = decode_group_id(rec.key, max_group_id_bytes), ""
    except UndecodableMessage as exc:
        group, why = UNDECODABLE_GROUP, f"no valid group id or hs-* headers in {_source(rec)}: {exc}"
    return Work(rec, rec.partition, group, undecodable=why, storage_idx=storage_idx)


def rq_work(
    rec: SourceRecord, storage_idx: int, max_group_id_bytes: int, fed_from: Position | None = None
) -> Work:
    """A copy read from RQ storage topic `storage_idx`; `fed_from`: a copy fed after a shard
    change, judged where its group's owner wrote it."""
    try:
        group = decode_group_id(rec.key, max_group_id_bytes)
        meta: InternalMeta = decode_internal(rec.headers)
    except UndecodableMessage as exc:
        why = f"no valid group id or hs-* headers in {_source(rec)}: {exc}"
        return Work(rec, rec.partition, UNDECODABLE_GROUP, undecodable=why, storage_idx=storage_idx)
    return Work(rec, meta.main_partition, group, meta, storage_idx=storage_idx, read_at=fed_from)


class _ByGroup:
    """The engine's GroupStates over a shard's states, which are keyed by group alone."""

    def __init__(self, states: ShardStates) -> None:
        self.states = states

    def get(self, partition: int, key: str) -> GroupState | None:
        return self.states.get(key)

    async def put(self, partition: int, key: str, state: GroupState) -> None:
        self.states.put(key, state)


class _ShardQueues:
    def __init__(self, produce_to: ProduceTo) -> None:
        self.produce_to = produce_to

    async def to_retry(self, work: Work, headers: Sequence[tuple[str, bytes]]) -> Position:
        return await self._write("rq", work, headers)

    async def to_dlq(self, work: Work, headers: Sequence[tuple[str, bytes]]) -> Position:
        return await self._write("dlq", work, headers)

    async def _write(self, queue: Queue, work: Work, headers: Sequence[tuple[str, bytes]]) -> Position:
        try:
            return await self.produce_to(queue, work.ordering_key, work.record, headers)
        except RecordRefused as exc:
            raise CopyRefused(str(exc)) from exc


class Delivery:
    def __init__(
        self,
        settings: Settings,
        sub: Subscription,
        states: ShardStates,
        stats: ShardStats,
        produce_to: ProduceTo,
        generation: int,
        endpoint: Endpoint | None = None,
        check: Callable[[], None] = lambda: None,
    ) -> None:
        """`check` raises when the shard may no longer act (`ShardRunner.check_lease`): called
        before each endpoint call (the shard's `produce_to` checks before each RQ/DLQ copy)."""
        self.sub = sub
        self.check = check
        self.owner_epoch: int | None = None  # the shard's lease epoch, once it holds one
        self.stats = stats
        self.endpoint = endpoint
        self._by_group = _ByGroup(states)
        self.engine = Engine(
            sub.retry,
            sub.on_dlq,
            self._by_group,
            _ShardQueues(produce_to),
            self._deliver,
            _message_id,
            generation=generation,  # MQ rewinds bump the epoch: older "handled" marks no longer apply
            log_context={"subscription": sub.name},
        )
        self.concurrent = sub.endpoint.kind == "http"  # groups side by side (`GroupLanes`)
        self._limit = asyncio.Semaphore(settings.subscription_max_in_flight)

    @property
    def states(self) -> ShardStates:
        return self._by_group.states

    @states.setter
    def states(self, states: ShardStates) -> None:
        self._by_group.states = states

    def message(self, work: Work) -> SubscriptionMessage:
        meta, rec = work.meta, work.record
        headers = rec.headers
        return SubscriptionMessage(
            subscription=self.sub.name,
            group_id=work.ordering_key,
            message_id=meta.message_id if meta is not None else _message_id(work),
            payload=rec.value or b"",
            attempt=(meta.failed_attempts if meta is not None else 0) + 1,
            headers={k: v.decode("utf-8", "replace") for k, v in user_headers(headers)} if headers else {},
            owner_epoch=self.owner_epoch,
        )

    async def _deliver(self, work: Work) -> bool:
        assert self.endpoint is not None
        self.check()  # as late as the shard can: the call's send is the act the lease covers
        try:
            await self.endpoint(self.message(work))
        except Exception:
            self.stats.failures += 1
            raise
        return True

    async def handle(self, work: Work) -> None:
        self.check()
        if (
            work.meta is None
            and not work.undecodable
            and self._by_group.states.get(work.ordering_key) is None
        ):
            # A group without state: the engine would deliver it and keep no state (`decide_main`,
            # `on_delivered`), so the endpoint is called without the engine's checks.
            try:
                await self._deliver(work)
            except Exception as exc:  # the endpoint's failure: retry or DLQ, as the engine decides
                self.stats.count(await self.engine.failed(work, exc))
                return
            self.stats.delivered += 1
            return
        self.stats.count(await self.engine.run(work))

    async def handle_within_limit(self, work: Work) -> None:
        """`handle`, one of at most SUBSCRIPTION_MAX_IN_FLIGHT endpoint calls of the shard."""
        async with self._limit:
            await self.handle(work)

    # -- per-message endpoints, one at a time (concurrent ones run in `GroupLanes`) -------------
    async def process(self, items: list[Work]) -> None:
        for item in items:
            await self.handle(item)


async def run_together(work: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run concurrently, all or none: a failure that is not an endpoint's (RQ/DLQ not confirmed)
    cancels the rest and is raised as itself; nothing is committed and the poll comes again."""
    try:
        async with asyncio.TaskGroup() as group:
            for coroutine in work:
                group.create_task(coroutine)
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from failed


def _message_id(work: Work) -> str:
    """A main record's id: its producer's `message-id` header, else its place in MQ."""
    headers = work.record.headers
    found = header_map(headers).get("message-id", b"").decode("utf-8", "replace") if headers else ""
    return found or message_id_for(work.main, work.record.partition)


def _source(rec: SourceRecord) -> str:
    return f"{rec.topic}[{rec.partition}]@{rec.offset}"
