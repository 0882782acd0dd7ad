"""In-memory commit log, state store and dead-letter queue: the ports without a broker (tests, dry runs)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.pipeline.model import LogEntry, NewEntry
from app.pipeline.offsets import ReaderState, WriterState
from app.pipeline.tolerance import DeadLetter

__all__ = ["MemoryCommitLog", "MemoryCursor", "MemoryDeadLetters", "MemoryStateStore"]


@dataclass(slots=True)
class PendingAppend:
    entries: list[NewEntry]
    confirmed: asyncio.Future[list[int]]


class MemoryCommitLog:
    """Appends are written and confirmed at once, unless `hold()`: then they wait, in order, for
    `confirm` (written, offsets given) or `refuse` (nothing written, the append fails)."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self.pending: deque[PendingAppend] = deque()
        self.holding = False
        self._grew = asyncio.Event()

    async def append(self, entries: Sequence[NewEntry]) -> list[int]:
        return await (await self.start_append(entries))

    async def prepare_append(self) -> None:
        return None

    async def start_append(self, entries: Sequence[NewEntry]) -> asyncio.Future[list[int]]:
        confirmed: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self.pending.append(PendingAppend(list(entries), confirmed))
        if not self.holding:
            self.confirm()
        return confirmed

    def hold(self) -> None:
        """Appends started from now on stay pending until confirmed or refused."""
        self.holding = True

    def release(self) -> None:
        """Stop holding; every pending append is confirmed."""
        self.holding = False
        self.confirm()

    def confirm(self, count: int | None = None) -> None:
        """Write the oldest `count` pending appends (all by default) and give their offsets."""
        for _ in range(len(self.pending) if count is None else count):
            pending = self.pending.popleft()
            pending.confirmed.set_result(self._write(pending.entries))

    def refuse(self, error: Exception, index: int = 0) -> None:
        """The pending append at `index` (the oldest by default) fails; none of its entries is written."""
        pending = self.pending[index]
        del self.pending[index]
        pending.confirmed.set_exception(error)

    def _write(self, entries: Sequence[NewEntry]) -> list[int]:
        offsets = []
        for new in entries:
            msg = new.message
            offset = len(self.entries)
            self.entries.append(
                LogEntry(
                    offset, msg.timestamp_ms, new.mode, msg.namespace, msg, new.position, new.doc_key, new.seq
                )
            )
            offsets.append(offset)
        self._grew.set()
        self._grew = asyncio.Event()
        return offsets

    async def end_offset(self) -> int:
        return len(self.entries)

    def cursor(self, start: int) -> MemoryCursor:
        return MemoryCursor(self, start)


class MemoryCursor:
    def __init__(self, log: MemoryCommitLog, start: int) -> None:
        self.log = log
        self.position = start

    async def next_batch(self, max_count: int, wait_s: float) -> list[LogEntry]:
        if self.position >= len(self.log.entries):
            try:
                await asyncio.wait_for(self.log._grew.wait(), wait_s)
            except TimeoutError:
                return []
        batch = self.log.entries[self.position : self.position + max_count]
        self.position += len(batch)
        return batch

    async def close(self) -> None:
        return None


class MemoryStateStore:
    """Keeps every save, like the offset log of the seed (a history per key)."""

    def __init__(self) -> None:
        self.history: list[tuple[str, int]] = []
        self.writers: dict[str, WriterState] = {}
        self.readers: dict[str, ReaderState] = {}

    async def save(self, writers: Mapping[str, WriterState], readers: Mapping[str, ReaderState]) -> None:
        for name, state in writers.items():
            if self.writers.get(name) != state:
                self.history.append((name, state.offset))
        self.writers = dict(writers)
        self.readers = dict(readers)

    async def close(self) -> None:
        return None


class MemoryDeadLetters:
    """Keeps every dead letter sent, in order (a redelivered one appears twice)."""

    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []
        self.closed = False

    async def send(self, letters: Sequence[DeadLetter]) -> None:
        self.letters.extend(letters)

    async def close(self) -> None:
        self.closed = True
