"""The consumer library's host of the ordered-delivery engine (`app.ordered.engine`): the message
a handler receives, the library's filter, the ordering key on every copy, and the fast path for
keys without state.

Ports (`app.ordered.ports`) keep this free of Kafka; `app.ordered.memory` has fakes for tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from app.consumer.model import ConsumerSettings, Handler, Message, message_id
from app.ordered.engine import Engine, Outcome
from app.ordered.ports import GroupStates, Queues
from app.ordered.records import user_headers
from app.ordered.rules import Position
from app.ordered.work import Work

__all__ = ["KEY_HEADER", "LibraryEngine", "Record"]

Headers = Sequence[tuple[str, bytes]]

KEY_HEADER = "hs-key"  # the ordering key, on copies (a key taken from a header or callable)

# The headers of a record without any: one shared read-only mapping, not a dict per record.
NO_HEADERS: Mapping[str, bytes] = MappingProxyType({})
_new_tuple = tuple.__new__


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


class _KeyedQueues:
    """The library's copies carry their ordering key (it may come from a header or a callable)."""

    def __init__(self, queues: Queues) -> None:
        self.queues = queues

    async def to_retry(self, work: Work, headers: Headers) -> Position:
        return await self.queues.to_retry(work, [*headers, (KEY_HEADER, work.ordering_key.encode())])

    async def to_dlq(self, work: Work, headers: Headers) -> Position:
        return await self.queues.to_dlq(work, [*headers, (KEY_HEADER, work.ordering_key.encode())])


class LibraryEngine:
    def __init__(
        self,
        settings: ConsumerSettings,
        handler: Handler,
        states: GroupStates,
        queues: Queues,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.handler = handler
        self.states = states
        self.engine = Engine(
            settings.retry,
            settings.on_dlq,
            states,
            _KeyedQueues(queues),
            self._deliver,
            self._message_id,
            clock=clock,
            log_context={"consumer": settings.name},
        )

    def message(self, work: Work) -> Message:
        meta, rec = work.meta, work.record
        storage_idx, offset = work.main
        return Message(
            topic=self.settings.source_topic(storage_idx),
            partition=meta.main_partition if meta is not None else rec.partition,
            offset=offset,
            key=rec.key,
            ordering_key=work.ordering_key,
            value=rec.value,
            headers=dict(user_headers(rec.headers)) if rec.headers else NO_HEADERS,
            attempt=(meta.failed_attempts if meta is not None else 0) + 1,
        )

    def fresh(self, work: Work) -> Message | None:
        """The message of a record no rule holds back and no state follows: a main record (not
        undecodable) of a key without state, which the engine delivers and leaves without state.
        The caller applies the filter and calls the handler itself (`failed` on a failure);
        None: `run` the record."""
        if work.meta is not None or work.undecodable:
            return None
        rec = work.record
        return self.fresh_main(
            work.storage_idx,
            work.partition,
            rec.partition,
            rec.offset,
            rec.key,
            work.ordering_key,
            rec.value,
            rec.headers,
        )

    def fresh_main(
        self,
        storage_idx: int,
        lane_partition: int,
        partition: int,
        offset: int,
        key: bytes | None,
        ordering_key: str,
        value: bytes | None,
        headers: Headers | None,
    ) -> Message | None:
        """`fresh` for a main record given by its fields, before (or without) a Work for it: the
        message `message` would build, or None when the key has state. `partition`: the record's
        own (a lane of a scaled storage topic has several)."""
        if self.states.get(lane_partition, ordering_key) is not None:
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

    async def run(self, work: Work) -> Outcome:
        return await self.engine.run(work)

    async def failed(self, work: Work, exc: Exception) -> Outcome:
        """After `fresh`: the filter or handler raised; retry or dead-letter as `run` would."""
        return await self.engine.failed(work, exc)

    async def _deliver(self, work: Work) -> bool:
        message = self.message(work)
        keep = self.settings.filter
        if work.meta is None and keep is not None and not keep(message):
            return False
        await self.handler(message)
        return True

    def _message_id(self, work: Work) -> str:
        storage_idx, offset = work.main
        partition = work.meta.main_partition if work.meta is not None else work.record.partition
        return message_id(self.settings.source_topic(storage_idx), partition, offset)
