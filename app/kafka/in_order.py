"""A Faust agent's records handled strictly in offset order, from a position it keeps itself.

Faust commits a topic's offsets on its own, and it can commit past a record its agent never
handled: a record dropped from a stream buffer at a rebalance is fetched again only from the
committed offset, and Faust treats a committed offset of 0 as none at all, so the next record's
commit passes it (seen in a crash test: a batch 1,268 acks short for good). And a client can start
a partition past records the log holds (`app.kafka.sequence`). An agent that must not lose a record
therefore keeps its own position per partition in its table, written after the effects of the
records it covers (to the same changelog partition), and hands each record through
`InOrderPositions.admit`:

- a record behind the position was handled already (a replay after a seek or a restart);
- a record at the position is handled, and the position moves past it;
- a record ahead of it means one was skipped: the agent seeks back to the position;
- a partition whose records stopped coming while some are left before its end is sought back by a
  watchdog (`watch`);
- a jump that keeps coming back after the seeks (retention took the records, or offsets without
  records) is believed by the readers' common rule (`app.kafka.sequence.Jump`).

`InOrderCursor` is the pure rule for one partition (the caller passes the time); `InOrderPositions`
keeps a cursor per partition served here over a `PositionStore` (the agent's table).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Hashable
from dataclasses import dataclass
from typing import Protocol

from app.errors import ServiceUnavailable
from app.kafka.sequence import Jump

__all__ = [
    "RESEEK_AFTER_S",
    "STALLED_AFTER_S",
    "InOrderCursor",
    "InOrderPositions",
    "PositionStore",
    "Verdict",
]

log = logging.getLogger(__name__)

RESEEK_AFTER_S = 5.0  # a seek back that brought nothing after this long is repeated
STALLED_AFTER_S = 5.0  # no record handled this long while records are left: seek back


class Verdict(enum.Enum):
    HANDLE = "handle"  # the record at the position: handle it, then the position moves past it
    SEEN = "seen"  # behind the position: handled before (a replay after a seek or a restart)
    SEEK = "seek"  # ahead of the position: a record was skipped; seek back to the position
    WAIT = "wait"  # ahead, and a seek back is already under way


@dataclass
class InOrderCursor:
    """One partition as this worker handles it (pure: the caller passes the time)."""

    expected: int  # the next offset to handle
    last_progress: float
    sought_at: float | None = None
    jump: Jump | None = None  # the record ahead, as last judged

    def admit(self, offset: int, now: float) -> Verdict:
        if offset < self.expected:
            return Verdict.SEEN
        if offset == self.expected:
            return Verdict.HANDLE
        if self.sought_at is not None and now - self.sought_at < RESEEK_AFTER_S:
            return Verdict.WAIT
        self.jump = Jump.sighted(self.jump, self.expected, offset, now)
        if self.jump.believed(now):
            return Verdict.HANDLE  # the offsets before it are gone: go on from it
        self.sought_at = now
        return Verdict.SEEK

    def handled(self, offset: int, now: float) -> None:
        self.expected = offset + 1
        self.last_progress = now
        self.sought_at = None
        self.jump = None

    def quiet(self, now: float) -> bool:
        """No record handled, nor a seek back made, for STALLED_AFTER_S."""
        return now - max(self.last_progress, self.sought_at or 0.0) >= STALLED_AFTER_S

    def stalled(self, end: int, now: float) -> bool:
        """Records are left before `end` and none was handled for a while: seek back (and note
        the seek, so the next check waits for it)."""
        if self.expected < end and self.quiet(now):
            self.sought_at = now
            return True
        return False


class PositionStore(Protocol):
    """Where an agent keeps its positions: its table, partition by partition. `read` and `write`
    are called only for a partition `serves` admits, with no await in between."""

    def ownership(self) -> Hashable:
        """Changes whenever the partitions served here changed (a rebalance)."""
        ...

    def served(self) -> Collection[int]: ...

    def serves(self, partition: int) -> bool: ...

    def read(self, partition: int) -> int | None: ...

    def write(self, partition: int, next_offset: int) -> None:
        """Moves the position forward only (a late write of an older position is a no-op)."""
        ...


Seek = Callable[[int, int], Awaitable[bool]]  # (partition, offset) -> sought (False: not assigned)
Offsets = Callable[[list[int]], list[int]]  # partitions -> an offset each (blocking; run in a thread)


class InOrderPositions:
    """The positions of one topic's partitions served here: which records to handle, when to seek
    back, and writing the positions to the store.

    `resume_offsets`: where the consumer group resumes (committed offset or log start), for a
    partition the store has no position for yet; `end_offsets`: for the watchdog."""

    def __init__(
        self,
        topic: str,
        store: PositionStore,
        seek: Seek,
        resume_offsets: Offsets,
        end_offsets: Offsets,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = topic
        self.store = store
        self._seek = seek
        self._resume_offsets = resume_offsets
        self._end_offsets = end_offsets
        self._clock = clock
        self._cursors: dict[int, InOrderCursor] = {}
        self._moved: dict[int, int] = {}  # partition -> position to write
        self._resume: dict[int, int] = {}  # partition -> where the group resumes, asked ahead
        self._ownership: Hashable = object()
        self.sought = 0  # seeks back so far (records skipped by the consumer, or stalls)

    def _owned(self) -> None:
        """Forget every cursor when this worker's partitions changed (a rebalance)."""
        now = self.store.ownership()
        if now != self._ownership:
            self._ownership = now
            self._cursors.clear()
            self._moved.clear()
            self._resume.clear()

    async def _cursor(self, partition: int) -> InOrderCursor | None:
        self._owned()
        cursor = self._cursors.get(partition)
        if cursor is not None:
            return cursor
        if not self.store.serves(partition):
            return None  # the record takes the caller's not-served path
        stored = self.store.read(partition)
        if stored is None:  # first sight: where the group resumes, asked once for every partition
            if partition not in self._resume:
                served = sorted({*self.store.served(), partition})
                offsets = await asyncio.to_thread(self._resume_offsets, served)
                self._resume.update(zip(served, offsets, strict=True))
            if partition in self._cursors:  # made while we asked: the first one stands
                return self._cursors[partition]
            stored = self._resume.pop(partition, None)
            if stored is None:  # a rebalance while we asked: the next record or check starts over
                return None
        cursor = self._cursors[partition] = InOrderCursor(stored, self._clock())
        return cursor

    async def admit(self, partition: int, offset: int) -> bool:
        """Whether to handle the record at `offset` now (True too for a partition not served here:
        the caller's own path for it decides)."""
        cursor = await self._cursor(partition)
        if cursor is None:
            return True
        verdict = cursor.admit(offset, self._clock())
        if verdict is Verdict.SEEK:
            await self._seek_back(partition, cursor, f"record {offset} came before {cursor.expected}")
        return verdict is Verdict.HANDLE

    def handled(self, partition: int, offset: int) -> None:
        cursor = self._cursors.get(partition)
        if cursor is not None:
            cursor.handled(offset, self._clock())
            self._moved[partition] = offset + 1

    def save(self) -> None:
        """Write the positions moved since the last save (after the records' effects, before the
        table is flushed)."""
        moved, self._moved = self._moved, {}
        for partition, next_offset in moved.items():
            if self.store.serves(partition):
                self.store.write(partition, next_offset)
            else:
                self._cursors.pop(partition, None)  # no longer served here: its new owner resumes

    async def watch(self) -> None:
        """Seek back partitions whose records stopped coming with some left before their end. Only
        quiet partitions cost an end-offset probe: one handling records is not stalled. A partition
        served here that has had no record yet is watched too (its only records may have been
        skipped). A round the broker does not answer (restarting, or this process was paused past
        its probes' timeouts) is given up; the next round asks again."""
        try:
            await self._watch_round()
        except ServiceUnavailable as exc:
            log.warning("%s: the watch could not read offsets (%s); trying again", self.topic, exc)

    async def _watch_round(self) -> None:
        self._owned()
        for partition in sorted(self.store.served()):
            if partition not in self._cursors and self.store.serves(partition):
                await self._cursor(partition)
        now = self._clock()
        partitions = sorted(p for p, cursor in self._cursors.items() if cursor.quiet(now))
        if not partitions:
            return
        ends = await asyncio.to_thread(self._end_offsets, partitions)
        for partition, end in zip(partitions, ends, strict=True):
            cursor = self._cursors.get(partition)
            if cursor is not None and cursor.stalled(end, now):
                await self._seek_back(partition, cursor, f"no record handled, {end - cursor.expected} left")

    async def _seek_back(self, partition: int, cursor: InOrderCursor, why: str) -> None:
        where = f"{self.topic}[{partition}]"
        if await self._seek(partition, cursor.expected):
            self.sought += 1
            log.warning("%s: %s; reading again from %d", where, why, cursor.expected)
        else:
            log.warning("%s: %s, but it is no longer assigned here", where, why)
            self._cursors.pop(partition, None)
