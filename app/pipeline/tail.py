"""The commit log's newest entries in memory, for writers that are caught up with the reader.

The engine adds a batch to the tail only after the log confirmed it and every batch appended before
it (in append order), so a writer fed from the tail sees exactly what it would read back from the log, and
its offset still moves only past entries both the log and its sink confirmed. The log stays the
record for replay: a writer whose next offset the tail does not hold (a restart, a writer that fell
behind the tail's capacity, entries another producer wrote in between) reads the log as before.

A tail entry carries the reader's own message, not one decoded from the log record: it is
JSON-equal to the record for every built-in reader (their values are JSON values). Writers share
those messages, so only writers without transforms use the tail (a transform that changed its
message in place would otherwise change what the other writers see).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from app.pipeline.model import LogEntry
from app.pipeline.ports import CommitLog, Cursor

__all__ = ["LogTail", "TailCursor"]


class LogTail:
    """Confirmed entries with consecutive offsets, the newest `capacity` (at least) of them."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(capacity, 1)
        self._entries: list[LogEntry] = []
        self._base = 0  # offset of _entries[0]
        self._grew = asyncio.Event()

    @property
    def end(self) -> int | None:
        """The offset after the newest entry; None while empty."""
        return self._base + len(self._entries) if self._entries else None

    def holds(self, offset: int) -> bool:
        """Whether `read(offset, ...)` is served from memory (the end included: caught up)."""
        end = self.end
        return end is not None and self._base <= offset <= end

    def add(self, entries: Sequence[LogEntry]) -> None:
        """Entries the log confirmed, in offset order. Offsets that do not follow on (another producer
        wrote in between) restart the tail at them; the entries before are read from the log."""
        if not entries:
            return
        first = entries[0].offset
        # A partition's offsets only grow, so first and last tell whether any are missing in between.
        if entries[-1].offset - first != len(entries) - 1:
            self._entries, self._base = [], 0
        else:
            if first != self.end:
                self._entries, self._base = [], first
            self._entries.extend(entries)
            surplus = len(self._entries) - self.capacity
            if surplus >= self.capacity:  # trimmed in chunks: a list slice a batch would cost more
                self._entries = self._entries[surplus:]
                self._base += surplus
        self._grew.set()
        self._grew = asyncio.Event()

    def read(self, start: int, max_count: int) -> list[LogEntry] | None:
        """Up to max_count entries from offset `start`; [] when `start` is the end (caught up), None
        when the tail does not hold `start` (read the log)."""
        if not self.holds(start):
            return None
        index = start - self._base
        return self._entries[index : index + max_count]

    async def wait(self, timeout_s: float) -> None:
        """Until the next add, or timeout_s."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._grew.wait(), timeout_s)


class TailCursor:
    """A writer's cursor: the tail while it holds the writer's next offset, the log otherwise."""

    def __init__(self, log: CommitLog, tail: LogTail, start: int) -> None:
        self.log = log
        self.tail = tail
        self.position = start
        self._cursor: Cursor | None = None
        self._cursor_position = start  # where _cursor reads next
        self.from_tail = 0  # entries served from memory (status, tests)

    async def next_batch(self, max_count: int, wait_s: float) -> list[LogEntry]:
        batch = self.tail.read(self.position, max_count)
        if batch == []:  # caught up: wait for the next confirmed append
            await self.tail.wait(wait_s)
            batch = self.tail.read(self.position, max_count)
        if batch is None:
            batch = await self._from_log(max_count, wait_s)
        else:
            self.from_tail += len(batch)
        if batch:
            self.position = batch[-1].offset + 1
        return batch

    async def _from_log(self, max_count: int, wait_s: float) -> list[LogEntry]:
        if self._cursor is not None and self._cursor_position != self.position:
            await self._cursor.close()
            self._cursor = None
        if self._cursor is None:
            self._cursor = self.log.cursor(self.position)
        batch = await self._cursor.next_batch(max_count, wait_s)
        if batch:
            self._cursor_position = batch[-1].offset + 1
        else:
            self._cursor_position = self.position
        return batch

    async def close(self) -> None:
        if self._cursor is not None:
            await self._cursor.close()
            self._cursor = None
