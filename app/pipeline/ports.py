"""Ports the pipeline engine runs on; adapters implement them (Kafka, Faust table, sinks, sources)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from app.pipeline.model import LogEntry, Message, NewEntry
from app.pipeline.offsets import ReaderState, WriterState
from app.pipeline.tolerance import DeadLetter

__all__ = [
    "CheckedSink",
    "CommitLog",
    "Cursor",
    "DeadLetterQueue",
    "PipelinedSink",
    "Sink",
    "Source",
    "StateStore",
]


class Cursor(Protocol):
    async def next_batch(self, max_count: int, wait_s: float) -> list[LogEntry]:
        """Up to max_count entries in offset order; [] when none arrived within wait_s."""
        ...

    async def close(self) -> None: ...


class CommitLog(Protocol):
    async def prepare_append(self) -> None:
        """Get ready to append (connect), so that the first append does not pay for it."""
        ...

    async def start_append(self, entries: Sequence[NewEntry]) -> Awaitable[list[int]]:
        """Start appending: returns once the entries are handed to the log, in call order (the
        log's order; calls must not overlap), with an awaitable that gives their offsets once the
        log confirmed every one, or raises. Raises itself when the log refuses the batch at once."""
        ...

    async def end_offset(self) -> int:
        """The next offset to be written."""
        ...

    def cursor(self, start: int) -> Cursor: ...


class StateStore(Protocol):
    async def save(self, writers: Mapping[str, WriterState], readers: Mapping[str, ReaderState]) -> None:
        """Persist writer offsets and reader states; returns once durable."""
        ...

    async def close(self) -> None: ...


class Sink(Protocol):
    async def write(self, messages: Sequence[Message]) -> None:
        """Bulk write; returns only once the target confirmed every message, raises otherwise."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class PipelinedSink(Sink, Protocol):
    """A sink that takes the next bulk while it still writes the previous one: `prepare` does the work
    without side effects (e.g. building SQL); `write_prepared` calls are written one at a time in the
    order they were made, and once one of a `stream` failed, its later ones fail without writing."""

    async def prepare(self, messages: Sequence[Message]) -> Any:
        """The batch made ready to write; changes nothing in the target."""
        ...

    async def write_prepared(self, prepared: Any, stream: object) -> None:
        """Bulk write of a prepared batch, with the guarantees of `write`."""
        ...


@runtime_checkable
class CheckedSink(Sink, Protocol):
    """A sink that converts messages for its target inside `write` (e.g. JSON encoding) and can
    check that conversion beforehand; a writer with `errors_tolerance: all` checks each bulk."""

    def check(self, messages: Sequence[Message]) -> None:
        """Raises when a message cannot be converted for the target; writes nothing."""
        ...


class DeadLetterQueue(Protocol):
    async def send(self, letters: Sequence[DeadLetter]) -> None:
        """Returns once every letter is durable (the broker confirmed it), raises otherwise."""
        ...

    async def close(self) -> None: ...


class Source(Protocol):
    def read(self, resume: Mapping[str, ReaderState]) -> AsyncIterator[list[NewEntry]]:
        """Batches of new entries, resuming from the given per-namespace reader states."""
        ...

    async def close(self) -> None: ...
