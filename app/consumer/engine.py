"""What the library does with one record whose key's turn has come: decide with the subscription
GroupState rules (the same functions, `app.subscription.state`), call the handler or filter, and
hand a failure to the retry or dead-letter topic; the key's new state is durable before the
call returns, so the record's offset may be committed after it.

Ports (`StateLog`, `Queues`) keep this free of Kafka; `app.consumer.memory` has fakes for tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol

from app.consumer.model import ConsumerSettings, Handler, Message, message_id
from app.subscription.records import FailureInfo, InternalMeta, encode_internal, user_headers
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

__all__ = ["Engine", "Outcome", "Queues", "Record", "StateLog", "Work"]

log = logging.getLogger(__name__)
Headers = Sequence[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Work:
    """A record and its lane. `meta` is set for a record read from the retry topic (its copy of a
    main record)."""

    record: Record
    partition: int  # the main partition: the lane's, the state's and the retry copy's
    ordering_key: str
    meta: InternalMeta | None = None
    undecodable: str = ""  # why the record cannot be handled (it goes to the DLQ)
    storage_idx: int = 0  # a main record's storage topic in a composite source (0: a plain topic)

    @property
    def lane(self) -> tuple[int, str]:
        return (self.partition, self.ordering_key)

    @property
    def main(self) -> Position:
        return self.meta.main if self.meta is not None else (self.storage_idx, self.record.offset)

    @property
    def read(self) -> MessageState | None:
        """Where this copy was read in the retry topic (None for main records)."""
        return None if self.meta is None else MessageState.at(self.meta.main, (0, self.record.offset))


class Outcome(StrEnum):
    DELIVERED = "delivered"
    FILTERED = "filtered"
    RETRYING = "retrying"  # failed; a copy waits in the retry topic
    SIDELINED = "sidelined"  # behind its key's waiting messages; not a failure
    DEAD_LETTERED = "dead_lettered"
    SKIPPED = "skipped"  # handled before a crash: a replay


class StateLog(Protocol):
    """The keys' GroupStates of the partitions this copy owns; `put` returns once durable."""

    def get(self, partition: int, key: str) -> GroupState | None: ...
    async def put(self, partition: int, key: str, state: GroupState) -> None: ...


class Queues(Protocol):
    """Copies to the retry and dead-letter topics, in the record's main partition; each returns
    the offset the broker confirmed."""

    async def to_retry(self, work: Work, headers: Headers) -> int: ...
    async def to_dlq(self, work: Work, headers: Headers) -> int: ...


# The headers of a record without any: one shared read-only mapping, not a dict per record.
NO_HEADERS: Mapping[str, bytes] = MappingProxyType({})
_new_tuple = tuple.__new__

KEY_HEADER = "hs-key"  # the ordering key, on copies (a key taken from a header or callable)


class Engine:
    def __init__(
        self,
        settings: ConsumerSettings,
        handler: Handler,
        states: StateLog,
        queues: Queues,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.handler = handler
        self.states = states
        self.queues = queues
        self.clock = clock

    def message(self, work: Work) -> Message:
        meta, rec = work.meta, work.record
        partition = work.partition
        storage_idx, offset = work.main
        topic = self.settings.source_topic(storage_idx)
        return Message(
            topic=topic,
            partition=partition,
            offset=offset,
            key=rec.key,
            ordering_key=work.ordering_key,
            value=rec.value,
            headers=dict(user_headers(rec.headers)) if rec.headers else NO_HEADERS,
            attempt=(meta.failed_attempts if meta is not None else 0) + 1,
        )

    def fresh(self, work: Work) -> Message | None:
        """The message of a record no rule holds back and no state follows: a main record (not
        undecodable) of a key without state, which `decide_main` delivers and `on_delivered`
        leaves without state. The caller applies the filter and calls the handler itself
        (`delivered` / `failed`); None: `run` the record."""
        if work.meta is not None or work.undecodable:
            return None
        rec = work.record
        return self.fresh_main(
            work.storage_idx, work.partition, rec.offset, rec.key, work.ordering_key, rec.value, rec.headers
        )

    def fresh_main(
        self,
        storage_idx: int,
        partition: int,
        offset: int,
        key: bytes | None,
        ordering_key: str,
        value: bytes | None,
        headers: Headers | None,
    ) -> Message | None:
        """`fresh` for a main record given by its fields, before (or without) a Work for it: the
        message `message` would build, or None when the key has state."""
        if self.states.get(partition, ordering_key) is not None:
            return None
        # One per record: built as the tuple it is, without the named tuple's Python-level __new__.
        return _new_tuple(
            Message,
            (
                self.settings.source_topic(storage_idx),
                partition,
                offset,
                key,
                ordering_key,
                value,
                dict(user_headers(headers)) if headers else NO_HEADERS,
                1,
            ),
        )

    async def failed(self, work: Work, exc: Exception) -> Outcome:
        """After `fresh`: the filter or handler raised; retry or dead-letter as `run` would."""
        return await self._failed(work, None, exc)

    async def run(self, work: Work) -> Outcome:
        if work.undecodable:
            failure = self._failure(work, "UndecodableMessage", work.undecodable, "undecodable")
            return await self._dead_letter(work, None, failure)
        state = self.states.get(*work.lane)
        read = work.read
        if read is None:
            action = decide_main(state, work.main, self.settings.on_dlq)
        else:
            action = decide_retry(state, work.main, read.internal, self.settings.on_dlq)
        if action is Action.SKIP:
            await self._put(work, state, on_skipped(state, read))
            return Outcome.SKIPPED
        if action is Action.SIDELINE:
            return await self._to_retry(
                work, state, self._meta(work, failed=None, due_ms=self._now_ms()), failed=False
            )
        if action is Action.FOLLOW_TO_DLQ:
            failure = self._failure(
                work, "GroupBlocked", "an earlier message of the key is in DLQ", "follows-blocked-group"
            )
            return await self._dead_letter(work, state, failure)
        message = self.message(work)
        keep = self.settings.filter
        try:
            filtered = read is None and keep is not None and not keep(message)
            if not filtered:
                await self.handler(message)
        except (
            Exception
        ) as exc:  # the handler's (or filter's) failure decides retry vs DLQ; the consumer goes on
            return await self._failed(work, state, exc)
        await self._put(work, state, on_delivered(state, work.main, read))
        return Outcome.FILTERED if filtered else Outcome.DELIVERED

    async def _failed(self, work: Work, state: GroupState | None, exc: Exception) -> Outcome:
        failed = (work.meta.failed_attempts if work.meta is not None else 0) + 1
        retry = self.settings.retry
        replay = work.meta is not None and work.meta.replay  # a replayed dead letter never retries
        reason = "replay-failed" if replay else "failed"
        failure = FailureInfo(type(exc).__name__, str(exc), _source(work.record), self._now_ms(), reason)
        by_type = getattr(exc, "retriable", True)
        if not replay and retry.is_retriable(bool(by_type)) and retry.may_retry(failed):
            due = self._now_ms() + int(retry.delay_s(failed) * 1000)
            meta = self._meta(work, failed=failed, due_ms=due, failure=failure)
            return await self._to_retry(work, state, meta, failed=True)
        return await self._dead_letter(work, state, failure, failed)

    async def _to_retry(
        self, work: Work, state: GroupState | None, meta: InternalMeta, *, failed: bool
    ) -> Outcome:
        offset = await self.queues.to_retry(work, self._headers(work, meta))
        written = MessageState.at(work.main, (0, offset))
        new = on_sidelined(state, work.main, written, failed=failed, read_from_rq=work.read)
        await self._put(work, state, new)
        return Outcome.RETRYING if failed else Outcome.SIDELINED

    async def _dead_letter(
        self, work: Work, state: GroupState | None, failure: FailureInfo, failed: int | None = None
    ) -> Outcome:
        attempts = failed if failed is not None else (work.meta.failed_attempts if work.meta else 0)
        meta = self._meta(work, failed=attempts, due_ms=0, failure=failure)
        offset = await self.queues.to_dlq(work, self._headers(work, meta))
        log.warning(
            "%s: key %s to DLQ (%s): %s: %s",
            _source(work.record),
            work.ordering_key,
            failure.reason,
            failure.error_class,
            failure.error,
        )
        if not work.undecodable:
            written = MessageState.at(work.main, (0, offset))
            await self._put(work, state, on_dead_lettered(state, work.main, written, work.read))
        return Outcome.DEAD_LETTERED

    async def _put(self, work: Work, old: GroupState | None, new: GroupState | None) -> None:
        if new is not None and new != old:
            await self.states.put(work.partition, work.ordering_key, new)

    def _meta(
        self, work: Work, *, failed: int | None, due_ms: int, failure: FailureInfo | None = None
    ) -> InternalMeta:
        base = work.meta
        attempts = failed if failed is not None else (base.failed_attempts if base is not None else 0)
        main = work.main
        return InternalMeta(
            main=main,
            main_partition=work.partition,
            message_id=message_id(self.settings.source_topic(main[0]), work.partition, main[1]),
            failed_attempts=attempts,
            due_ms=due_ms,
            failure=failure,
            replay=base is not None and base.replay,  # a replay sidelined again stays one
        )

    def _headers(self, work: Work, meta: InternalMeta) -> list[tuple[str, bytes]]:
        out = encode_internal(meta, work.record.headers)
        out.append((KEY_HEADER, work.ordering_key.encode()))
        return out

    def _failure(self, work: Work, error_class: str, error: str, reason: str) -> FailureInfo:
        return FailureInfo(error_class, error, _source(work.record), self._now_ms(), reason)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)


def _source(rec: Record) -> str:
    return f"{rec.topic}[{rec.partition}]@{rec.offset}"
