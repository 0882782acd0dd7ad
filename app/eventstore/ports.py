"""The storage port the event store engine writes through; the Cosmos adapter implements it.

Writes signal a lost race with WriteConflict (a control-flow signal, not an error): the engine
reloads, re-decides and tries again.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from app.eventstore.model import BatchDocument, TipDocument

__all__ = ["NOT_MODIFIED", "NotModified", "StreamStorage", "WriteConflict"]


class NotModified(enum.Enum):
    """The tip still has the etag the reader knew (real Cosmos answers 304 for 1 RU)."""

    TOKEN = "not-modified"


NOT_MODIFIED = NotModified.TOKEN


class WriteConflict(Exception):
    """Another writer changed the stream since it was read."""


class StreamStorage(Protocol):
    """Point reads and conditional writes of one container of streams."""

    async def read_tip(self, stream: str, known_etag: str | None) -> TipDocument | NotModified | None:
        """The tip, None when the stream is empty, NOT_MODIFIED when its etag is ``known_etag``."""
        ...

    def iter_batches(
        self, stream: str, from_index: int, below_index: int, *, descending: bool
    ) -> AsyncIterator[Sequence[BatchDocument]]:
        """Batches with events in [from_index, below_index), a page per request, read lazily
        so a backward load can stop at the first page holding an origin event."""
        ...

    async def create_tip(self, tip: TipDocument) -> str:
        """Create the tip of an empty stream; its new etag. WriteConflict if it exists."""
        ...

    async def replace_tip(self, tip: TipDocument, expected_etag: str) -> str:
        """Replace the tip if its etag is still ``expected_etag``; the new etag, or WriteConflict."""
        ...

    async def delete_batch(self, stream: str, index: int) -> None:
        """Delete the batch document starting at ``index``; one that is not there is no error."""
        ...

    async def delete_tip(self, stream: str, expected_etag: str) -> None:
        """Delete the tip if its etag is still ``expected_etag``; WriteConflict if not (or gone)."""
        ...

    async def write_batch(self, batch: BatchDocument) -> None:
        """Write a calved batch: create it, or grow an uncommitted one with the same id.

        WriteConflict when the existing document already holds more events (this writer read a
        stale tip). Never shrinks a document, so a retry can neither duplicate nor lose events.
        """
        ...
