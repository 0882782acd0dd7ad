"""The ack agent's positions (`app.batch.ack_position`) over the partitions this worker serves:
which records to handle, when to seek back, and writing the positions to the table."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from app.batch.ack_position import AckCursor, Verdict, read_position, write_position
from app.batch.errors import PartitionNotReady
from app.batch.model import BatchStore

__all__ = ["AckPositions"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Partitions(Protocol):
    """What the positions need of the batch service: which table partitions are served here,
    and an all-or-nothing operation on one (PartitionNotReady when not served)."""

    ready: set[int]
    revocations: int

    def run(self, partition: int, operation: Callable[[BatchStore], T]) -> T: ...


Seek = Callable[[int, int], Awaitable[bool]]  # (partition, offset) -> sought (False: not assigned)
Offsets = Callable[[list[int]], list[int]]  # partitions -> an offset each (blocking; run in a thread)


class AckPositions:
    def __init__(
        self,
        service: Partitions,
        seek: Seek,
        resume_offsets: Offsets,
        end_offsets: Offsets,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        self._seek = seek
        self._resume_offsets = resume_offsets  # where the consumer group resumes: committed or log start
        self._end_offsets = end_offsets
        self._clock = clock
        self._cursors: dict[int, AckCursor] = {}
        self._moved: dict[int, int] = {}  # partition -> position to write
        self._resume: dict[int, int] = {}  # partition -> where the group resumes, asked ahead
        self._ownership: tuple[int, frozenset[int]] = (-1, frozenset())
        self.sought = 0  # seeks back so far (records skipped by the consumer, or stalls)

    def _served(self) -> None:
        """Forget every cursor when this worker's table partitions changed (a rebalance)."""
        now = (self.service.revocations, frozenset(self.service.ready))
        if now != self._ownership:
            self._ownership = now
            self._cursors.clear()
            self._moved.clear()
            self._resume.clear()

    async def _cursor(self, partition: int) -> AckCursor | None:
        self._served()
        cursor = self._cursors.get(partition)
        if cursor is not None:
            return cursor
        try:
            stored = self.service.run(partition, read_position)
        except PartitionNotReady:
            return None  # the record takes the not-ready path (wait, or re-queue to the owner)
        if stored is None:  # first sight: where the group resumes, asked once for every partition
            if partition not in self._resume:
                served = sorted(self.service.ready | {partition})
                offsets = await asyncio.to_thread(self._resume_offsets, served)
                self._resume.update(zip(served, offsets, strict=True))
            stored = self._resume.pop(partition)
        cursor = self._cursors[partition] = AckCursor(stored, self._clock())
        return cursor

    async def admit(self, partition: int, offset: int) -> bool:
        """Whether to handle the record at `offset` now."""
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
        """Write the positions moved since the last save (call before flushing the table)."""
        moved, self._moved = self._moved, {}
        for partition, next_offset in moved.items():
            try:
                self.service.run(partition, functools.partial(write_position, next_offset=next_offset))
            except PartitionNotReady:
                self._cursors.pop(partition, None)  # no longer served here: its new owner resumes

    async def watch(self) -> None:
        """Seek back partitions whose records stopped coming with some left before their end. Only
        quiet partitions cost an end-offset probe: one handling records is not stalled."""
        self._served()
        now = self._clock()
        partitions = sorted(p for p, cursor in self._cursors.items() if cursor.quiet(now))
        if not partitions:
            return
        ends = await asyncio.to_thread(self._end_offsets, partitions)
        for partition, end in zip(partitions, ends, strict=True):
            cursor = self._cursors.get(partition)
            if cursor is not None and cursor.stalled(end, now):
                await self._seek_back(partition, cursor, f"no record handled, {end - cursor.expected} left")

    async def _seek_back(self, partition: int, cursor: AckCursor, why: str) -> None:
        if await self._seek(partition, cursor.expected):
            self.sought += 1
            log.warning("ack partition %d: %s; reading again from %d", partition, why, cursor.expected)
        else:
            log.warning("ack partition %d: %s, but it is no longer assigned here", partition, why)
            self._cursors.pop(partition, None)
