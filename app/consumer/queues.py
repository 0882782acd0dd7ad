"""The copy's writes to its own topics: key states and DLQ marks in `<name>-state`, copies to
`<name>-retry` and `<name>-dlq`, each confirmed by the broker before the engine goes on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import orjson

from app.consumer.model import ConsumerSettings
from app.consumer.orphans import DLQ_MARK_KEY, DlqMark
from app.crashpoints import crash_point
from app.kafka.broker import broker_for
from app.kafka.producing import AsyncProducer, RecordRefused
from app.kafka.reading import read_from
from app.ordered.errors import CopyRefused, UndecodableState
from app.ordered.rules import GroupState, Position, state_of_record
from app.ordered.work import Work

Headers = Sequence[tuple[str, bytes]]

__all__ = ["KafkaQueues", "KafkaStateLog"]

log = logging.getLogger(__name__)


class KafkaStateLog:
    """Key states of the owned partitions, in memory, written through to `<name>-state`
    (partition = the source partition, key = the ordering key)."""

    def __init__(self, settings: ConsumerSettings, producer: AsyncProducer) -> None:
        self.settings = settings
        self.producer = producer
        self._states: dict[int, dict[str, GroupState]] = {}
        # Keys whose state may become forgettable: written or loaded since last judged unsettled.
        self._to_check: dict[int, set[str]] = {}
        self.dlq_from: dict[int, int] = {}  # the DLQ mark in `<name>-state`, as loaded or written
        self.dlq_marks: dict[int, DlqMark] = {}  # the owned DLQ partitions' marks, as they move
        # Raises when this copy may no longer write for a partition (its lease: `KeyedConsumer`).
        self.guard: Callable[[int], None] = _any_partition

    def load(self, partitions: list[int]) -> None:
        """Read the partitions' newest states and DLQ marks (blocking: run it in a thread)."""
        loaded: dict[int, dict[str, GroupState]] = {p: {} for p in partitions}
        marks = {p: 0 for p in partitions}
        starts = {(self.settings.state_topic, p): 0 for p in partitions}
        for msg in read_from(broker_for(self.settings), starts, compacted=True):
            if msg.key() == DLQ_MARK_KEY:
                if msg.value() is not None:
                    marks[msg.partition()] = max(
                        marks[msg.partition()], orjson.loads(msg.value())["dlq_from"]
                    )
                continue
            key = (msg.key() or b"").decode("utf-8", "replace")
            if msg.value() is None:
                loaded[msg.partition()].pop(key, None)
                continue
            try:
                loaded[msg.partition()][key] = state_of_record(msg.value())
            except UndecodableState as exc:
                # as if never written: the key's previous state stands (one bad record must not
                # keep a partition from being taken over)
                log.error("%s[%d]@%d: key %r: %s", msg.topic(), msg.partition(), msg.offset(), key, exc)
        self._states.update(loaded)
        self._to_check.update((p, set(states)) for p, states in loaded.items())
        self.dlq_from.update(marks)

    def forget(self, partitions: set[int]) -> None:
        for p in partitions:
            self._states.pop(p, None)
            self._to_check.pop(p, None)
            self.dlq_from.pop(p, None)
            self.dlq_marks.pop(p, None)

    def get(self, partition: int, key: str) -> GroupState | None:
        return self._states.get(partition, {}).get(key)

    def to_check(self, partition: int) -> list[str]:
        """The partition's keys whose state may be forgettable: written or loaded since `checked`
        (a copy: the caller may drop some). A scan of every state each interval would cost in
        proportion to the keys with dead letters, which keep their states."""
        return list(self._to_check.get(partition, ()))

    def checked(self, partition: int, key: str) -> None:
        """The key's state cannot be forgotten until it changes (`settled` is false)."""
        self._to_check.get(partition, set()).discard(key)

    async def drop(self, partition: int, key: str) -> None:
        """Forget a key's state (see `forgettable`): gone from memory at once, so a record of the
        key that starts meanwhile runs as for a key that never failed (which decides the same),
        then a tombstone in `<name>-state`. Without the tombstone (a crash, a failed write) the
        next owner loads the state, which decides the same as none."""
        self.guard(partition)
        crash_point("consumer.state.forget")
        self._states.get(partition, {}).pop(key, None)
        self.checked(partition, key)
        await self.producer.send(self.settings.state_topic, partition, key.encode(), None)

    async def put(self, partition: int, key: str, state: GroupState) -> None:
        self.guard(partition)
        crash_point("consumer.state.write")
        value = orjson.dumps({"s": state.to_json(), "at_ms": int(time.time() * 1000)})
        await self.producer.send(self.settings.state_topic, partition, key.encode(), value)
        self._states.setdefault(partition, {})[key] = state
        self._to_check.setdefault(partition, set()).add(key)
        mark = self.dlq_marks.get(partition)
        if mark is not None and state.dlq.p is not None:
            mark.recorded(state.dlq.p.internal_topic_offset)

    async def write_dlq_marks(self) -> None:
        """Write each owned partition's DLQ mark that moved: the next owner reads the DLQ from it."""
        moved = {p: m.mark for p, m in self.dlq_marks.items()}
        await asyncio.gather(
            *(
                self._write_mark(p, at)
                for p, at in moved.items()
                if at is not None and at > self.dlq_from.get(p, 0)
            )
        )

    async def _write_mark(self, partition: int, at: int) -> None:
        self.guard(partition)
        crash_point("consumer.dlq.mark")
        value = orjson.dumps({"dlq_from": at, "at_ms": int(time.time() * 1000)})
        await self.producer.send(self.settings.state_topic, partition, DLQ_MARK_KEY, value)
        if partition in self.dlq_marks:
            self.dlq_from[partition] = max(at, self.dlq_from.get(partition, 0))


class KafkaQueues:
    def __init__(self, settings: ConsumerSettings, producer: AsyncProducer, states: KafkaStateLog) -> None:
        self.settings = settings
        self.producer = producer
        self.states = states

    async def to_retry(self, work: Work, headers: Headers) -> Position:
        self.states.guard(work.partition)
        try:
            delivered = await self.producer.send(
                self.settings.retry_topic, work.partition, work.record.key, work.record.value, headers
            )
        except RecordRefused as exc:
            raise CopyRefused(str(exc)) from exc
        crash_point(
            "consumer.retry.confirmed"
        )  # the copy is in the retry topic; the key's state does not say so
        return (0, delivered.offset)

    async def to_dlq(self, work: Work, headers: Headers) -> Position:
        self.states.guard(work.partition)
        mark = self.states.dlq_marks.get(work.partition)
        if mark is not None:
            mark.sending()
        try:
            delivered = await self.producer.send(
                self.settings.dlq_topic, work.partition, work.record.key, work.record.value, headers
            )
        except BaseException as exc:
            if mark is not None:
                mark.failed()
            if isinstance(exc, RecordRefused):
                raise CopyRefused(str(exc)) from exc
            raise
        if mark is not None:  # an undecodable record's copy is recorded in no key state
            mark.confirmed(delivered.offset, needs_state=not work.undecodable)
        crash_point("consumer.dlq.confirmed")
        return (0, delivered.offset)


def _any_partition(_partition: int) -> None:
    """No lease to check (a state log used outside a running copy)."""
