"""Event-store documents as a change feed shows them: the events each one holds, with their stream
and index (pure).

A write calves a batch before it replaces the tip, and a container's change feed gives the
changes of one stream (one partition key) in the order they were made, each document at its
latest version. So reading every batch and tip the feed shows yields a stream's events in index
order, a tip's events again each time the tip changes (the whole run again, never an older event
alone after a newer one), and nothing a write dropped (RollingState, a Custom transmute) or a
prune or delete removed before the read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.eventstore.model import TIP_ID, parse_batch, parse_tip
from app.eventstore.survey import category_of

__all__ = ["FeedEvent", "feed_events"]


@dataclass(frozen=True, slots=True)
class FeedEvent:
    stream: str
    index: int
    case: str
    data: Any
    meta: Mapping[str, Any] | None
    time: str

    @property
    def key(self) -> str:
        """Unique per event: `<stream>/<index>` (a writer upserting by it takes a repeat as a no-op)."""
        return f"{self.stream}/{self.index}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "index": self.index,
            "case": self.case,
            "data": self.data,
            "meta": dict(self.meta) if self.meta is not None else None,
            "time": self.time,
        }


def feed_events(document: Mapping[str, Any], category: str | None = None) -> list[FeedEvent]:
    """The events a tip or batch document holds, in index order (of `category` only, when given).
    CorruptStream when the document is an event-store document that does not parse."""
    stream = document.get("p")
    if not isinstance(stream, str) or "e" not in document:
        return []
    if category is not None and category_of(stream) != category:
        return []
    doc = parse_tip(document, stream) if document.get("id") == TIP_ID else parse_batch(document, stream)
    return [
        FeedEvent(stream, doc.index + k, e.case, e.data, e.meta, e.timestamp)
        for k, e in enumerate(doc.events)
    ]
