"""In-memory commit log, state store and dead-letter queue: the ports without a broker (tests, dry runs)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from app.pipeline.model import LogEntry, NewEntry, record_key
from app.pipeline.offsets import ReaderState, WriterState
from app.pipeline.tolerance import DeadLetter

__all__ = ["MemoryCommitLog", "MemoryCursor", "MemoryDeadLetters", "MemoryStateStore"]


class MemoryCommitLog:
    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self._grew = asyncio.Event()

    async def append(self, entries: Sequence[NewEntry]) -> list[int]:
        offsets = []
        for new in entries:
            msg = new.message
            offset = len(self.entries)
            self.entries.append(
                LogEntry(
                    offset, msg.timestamp_ms, new.mode, msg.namespace, msg, new.position, record_key(new)
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


class MemoryDeadLetters:
    """Keeps every dead letter sent, in order (a redelivered one appears twice)."""

    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []
        self.closed = False

    async def send(self, letters: Sequence[DeadLetter]) -> None:
        self.letters.extend(letters)

    async def close(self) -> None:
        self.closed = True
