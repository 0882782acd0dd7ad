"""What a shard does with each message it read: decide with the GroupState rules, deliver to the
endpoint, and hand failures to RQ or DLQ, updating the group's state after the broker confirmed.

`Delivery.process` takes the records of one poll in read order (due RQ records first, then MQ).
Per-message endpoints get one message at a time per group (groups run concurrently for HTTP);
batch sinks get whole batches (see `app.subscription.batch`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.composite.producer import RecordRefused
from app.errors import HubstreamError
from app.settings import Settings
from app.subscription.endpoints import Endpoint, failure_status
from app.subscription.model import Subscription
from app.subscription.records import (
    FailureInfo,
    InternalMeta,
    SubscriptionMessage,
    header_map,
    message_id_for,
    user_headers,
)
from app.subscription.state import (
    Action,
    GroupState,
    MessageState,
    Position,
    decide_main,
    decide_retry,
    on_dead_lettered,
    on_delivered,
    on_sidelined,
    on_skipped,
)

__all__ = [
    "UNDECODABLE_GROUP",
    "Delivery",
    "Item",
    "ProduceTo",
    "ShardStates",
    "ShardStats",
    "SourceRecord",
    "run_together",
]

log = logging.getLogger(__name__)
UNDECODABLE_GROUP = "__undecodable__"


class SourceRecord(Protocol):
    """A fetched record as a shard's delivery reads it (aiokafka's ConsumerRecord is one)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(frozen=True)
class RecordStub:
    """A record's place without its payload or headers (what stands in for a refused copy)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None = b""
    headers: Sequence[tuple[str, bytes]] = field(default_factory=list)


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
        """Drop these groups' states (`app.subscription.state.forgettable` holds for each)."""
        ...


# (queue "rq" | "dlq", group id, source record, hs-* metadata) -> where the broker confirmed it
ProduceTo = Callable[[str, str, SourceRecord, InternalMeta], Awaitable[MessageState]]


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


@dataclass(frozen=True, slots=True)
class Item:
    """A record read by the shard; `meta` is set for decodable RQ records."""

    record: SourceRecord
    group_id: str
    storage_idx: int
    from_rq: bool
    meta: InternalMeta | None = None
    fed_from: Position | None = None  # a copy fed after a shard change: where its owner wrote it

    @property
    def undecodable(self) -> bool:
        return self.group_id == UNDECODABLE_GROUP or (self.from_rq and self.meta is None)

    @property
    def main(self) -> Position:
        return self.meta.main if self.meta is not None else (self.storage_idx, self.record.offset)

    @property
    def read(self) -> MessageState | None:
        """Where this copy sits in RQ for its group's rules (None for MQ records): where it was
        read, or for a fed copy, where its group's owner wrote it."""
        if self.meta is None:
            return None
        return MessageState.at(self.meta.main, self.fed_from or (self.storage_idx, self.record.offset))

    def delivery_meta(self) -> InternalMeta:
        if self.meta is not None:
            return self.meta
        rec = self.record
        message_id = header_map(rec.headers).get("message-id", b"").decode("utf-8", "replace")
        message_id = message_id or message_id_for(self.main, rec.partition)
        return InternalMeta(self.main, rec.partition, message_id, 0, 0)


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
    ) -> None:
        self.settings = settings
        self.sub = sub
        self.states = states
        self.stats = stats
        self.produce_to = produce_to
        self.generation = generation  # MQ rewinds bump the epoch: older "handled" marks no longer apply
        self.endpoint = endpoint
        self._concurrent = sub.endpoint.kind == "http"
        self._limit = asyncio.Semaphore(settings.subscription_max_in_flight)

    # -- decisions ------------------------------------------------------------------------------
    def decide(self, item: Item, state: GroupState | None) -> Action:
        if item.meta is None:
            return decide_main(state, item.main, self.sub.on_dlq, self.generation)
        read = item.read
        assert read is not None
        return decide_retry(state, item.main, read.internal, self.sub.on_dlq)

    def message(self, item: Item) -> SubscriptionMessage:
        meta = item.delivery_meta()
        rec = item.record
        return SubscriptionMessage(
            subscription=self.sub.name,
            group_id=item.group_id,
            message_id=meta.message_id,
            payload=rec.value or b"",
            attempt=meta.failed_attempts + 1,
            headers={k: v.decode("utf-8", "replace") for k, v in user_headers(rec.headers)},
        )

    # -- outcomes -------------------------------------------------------------------------------
    def delivered(self, item: Item) -> None:
        self.stats.delivered += 1
        new = on_delivered(self.states.get(item.group_id), item.main, item.read, self.generation)
        if new is not None:
            self.states.put(item.group_id, new)

    async def not_delivered(self, item: Item, action: Action) -> None:
        """SKIP, or sideline behind the group's pending messages, or follow a DLQ'd one to DLQ."""
        group, read = item.group_id, item.read
        if action is Action.SKIP:
            self.stats.skipped += 1
            new = on_skipped(self.states.get(group), read)
            if new is not None:
                self.states.put(group, new)
            return
        base = item.delivery_meta()
        meta = InternalMeta(
            base.main, base.main_partition, base.message_id, base.failed_attempts, _now_ms(), base.replay
        )
        if action is Action.SIDELINE:
            await self._to_rq(item, meta, failed=False)
            return
        failure = FailureInfo(
            "GroupBlocked",
            "an earlier message of the group is in DLQ",
            source_of(item.record),
            _now_ms(),
            "follows-blocked-group",
        )
        await self._to_dlq(item, with_failure(meta, failure))

    async def failed(self, item: Item, exc: BaseException) -> None:
        """The endpoint did not take the message: retry via RQ, or DLQ (replays never retry)."""
        self.stats.failures += 1
        meta = item.delivery_meta()
        status, timed_out = failure_status(exc)
        by_type = exc.retriable if isinstance(exc, HubstreamError) else True
        failed = meta.failed_attempts + 1
        retriable = self.sub.retry.is_retriable(by_type, status, timed_out)
        reason = "replay-failed" if meta.replay else "failed"
        failure = FailureInfo(type(exc).__name__, str(exc), source_of(item.record), _now_ms(), reason)
        if retriable and not meta.replay and self.sub.retry.may_retry(failed):
            due = _now_ms() + int(self.sub.retry.delay_s(failed) * 1000)
            nxt = InternalMeta(meta.main, meta.main_partition, meta.message_id, failed, due, failure=failure)
            await self._to_rq(item, nxt, failed=True)
        else:
            await self._to_dlq(item, with_failure(meta, failure, failed))

    async def _to_rq(self, item: Item, meta: InternalMeta, *, failed: bool) -> None:
        """Hand the message to RQ (confirmed by the broker), then record the group as sidelined.
        A copy the broker refuses for good (too large for RQ) goes to DLQ, the reason in its
        headers: retrying the produce at every restart would hold the group, and the shard, forever."""
        group = item.group_id
        try:
            written = await self.produce_to("rq", group, item.record, meta)
        except RecordRefused as exc:
            failure = FailureInfo(
                "RecordRefused",
                f"RQ refused the copy: {exc}",
                source_of(item.record),
                _now_ms(),
                "rq-refused",
            )
            await self._to_dlq(item, with_failure(meta, failure))
            return
        if failed and meta.failure is not None:
            log.info(
                "%s: group %s to RQ after %d failed attempt(s): %s: %s",
                _where(item.record),
                group,
                meta.failed_attempts,
                meta.failure.error_class,
                meta.failure.error,
            )
        self.states.put(
            group,
            on_sidelined(
                self.states.get(group),
                item.main,
                written,
                failed=failed,
                read_from_rq=item.read,
                generation=self.generation,
            ),
        )
        self.stats.sidelined += 1

    async def _to_dlq(self, item: Item, meta: InternalMeta) -> None:
        """Hand the message to DLQ (confirmed by the broker), then record the group's DLQ state."""
        group = item.group_id
        written = await self._dead_letter(group, item.record, meta)
        failure = meta.failure
        log.warning(
            "%s: group %s to DLQ (%s): %s: %s",
            _where(item.record),
            group,
            failure.reason if failure else "failed",
            failure.error_class if failure else "?",
            failure.error if failure else "",
        )
        self.states.put(
            group, on_dead_lettered(self.states.get(group), item.main, written, item.read, self.generation)
        )
        self.stats.dead_lettered += 1

    async def _dead_letter(self, group: str, rec: SourceRecord, meta: InternalMeta) -> MessageState:
        """The DLQ copy; when the broker refuses it for good, a stub in its place: no payload nor
        headers of its own, the reason and the message's source (it stays in its main topic)."""
        try:
            return await self.produce_to("dlq", group, rec, meta)
        except RecordRefused as exc:
            log.error("%s: DLQ refused the copy (%s); a stub takes its place", _where(rec), exc)
            reason = f"DLQ refused the copy ({exc}); the message is at {source_of(rec)}"
            failure = FailureInfo("RecordRefused", reason, source_of(rec), _now_ms(), "dlq-refused")
            stub = RecordStub(rec.topic, rec.partition, rec.offset)
            return await self.produce_to("dlq", group, stub, with_failure(meta, failure))

    async def undecodable(self, item: Item) -> None:
        rec = item.record
        main = (item.storage_idx, rec.offset)
        failure = FailureInfo(
            "UndecodableMessage",
            f"no valid group id or hs-* headers in {source_of(rec)}",
            source_of(rec),
            _now_ms(),
            "undecodable",
        )
        meta = InternalMeta(main, rec.partition, message_id_for(main, rec.partition), 0, 0, failure=failure)
        await self._dead_letter(UNDECODABLE_GROUP, rec, meta)
        self.stats.dead_lettered += 1
        log.warning("%s: undecodable record sent to DLQ", _where(rec))

    # -- per-message endpoints ------------------------------------------------------------------
    async def process(self, items: list[Item]) -> None:
        if not items:
            return
        if not self._concurrent:
            for item in items:
                await self.handle(item)
            return
        by_group: dict[str, list[Item]] = defaultdict(list)
        for item in items:
            by_group[item.group_id].append(item)

        async def run_group(group_items: list[Item]) -> None:
            async with self._limit:
                for item in group_items:
                    await self.handle(item)

        await run_together(run_group(g) for g in by_group.values())

    async def handle(self, item: Item) -> None:
        if item.undecodable:
            await self.undecodable(item)
            return
        action = self.decide(item, self.states.get(item.group_id))
        if action is not Action.DELIVER:
            await self.not_delivered(item, action)
            return
        assert self.endpoint is not None
        try:
            await self.endpoint(self.message(item))
        except Exception as exc:  # the endpoint's failure decides retry vs DLQ; the shard goes on
            await self.failed(item, exc)
            return
        self.delivered(item)


async def run_together(work: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run concurrently, all or none: a failure that is not an endpoint's (RQ/DLQ not confirmed)
    cancels the rest and is raised as itself; nothing is committed and the poll comes again."""
    try:
        async with asyncio.TaskGroup() as group:
            for coroutine in work:
                group.create_task(coroutine)
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from failed


def _now_ms() -> int:
    return int(time.time() * 1000)


def source_of(rec: SourceRecord) -> str:
    return f"{rec.topic}[{rec.partition}]@{rec.offset}"


def with_failure(meta: InternalMeta, failure: FailureInfo, failed: int | None = None) -> InternalMeta:
    return InternalMeta(
        meta.main,
        meta.main_partition,
        meta.message_id,
        failed if failed is not None else meta.failed_attempts,
        0,
        meta.replay,
        failure,
    )


def _where(record: SourceRecord) -> str:
    """A record's place as logs name it: `topic[partition] offset=N`."""
    return f"{record.topic}[{record.partition}] offset={record.offset}"
