"""What a container of streams holds, from its documents as stored (Equinox's `eqx stats` and
`eqx query`): counts of streams, documents and events, and the streams of a category, optionally
only those whose tip holds an unfold of a given case. Pure: the caller reads the documents (a read
feed over the whole container: for operators, not for a request path)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.eventstore.model import TIP_ID

__all__ = ["ContainerStats", "StreamSummary", "survey"]


@dataclass(frozen=True, slots=True)
class StreamSummary:
    stream: str
    version: int  # the tip's next index
    tip_events: int
    unfold_cases: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "version": self.version,
            "tipEvents": self.tip_events,
            "unfolds": list(self.unfold_cases),
        }


@dataclass
class ContainerStats:
    streams: int = 0
    tips: int = 0
    batches: int = 0
    events: int = 0  # stored events: those of the batches and the tips (pruned ones not counted)
    categories: dict[str, int] = field(default_factory=dict)  # streams per category
    matching: list[StreamSummary] = field(default_factory=list)

    def as_dict(self, *, with_streams: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "streams": self.streams,
            "documents": {"tips": self.tips, "batches": self.batches},
            "events": self.events,
            "categories": dict(sorted(self.categories.items())),
        }
        if with_streams:
            out["matching"] = [s.as_dict() for s in sorted(self.matching, key=lambda s: s.stream)]
        return out


def category_of(stream: str) -> str:
    """A stream's category: its name up to the first '-' (Equinox's convention)."""
    return stream.split("-", 1)[0]


def survey(
    documents: Iterable[Mapping[str, Any]], *, category: str | None = None, unfold_case: str | None = None
) -> ContainerStats:
    """Counts over every document; `matching`: the streams of `category` (any, when None) whose
    tip holds an unfold of `unfold_case` (any, when None)."""
    stats = ContainerStats()
    for doc in documents:
        events = len(doc.get("e") or ())
        stats.events += events
        if str(doc.get("id")) != TIP_ID:
            stats.batches += 1
            continue
        stats.tips += 1
        stream = str(doc.get("p", ""))
        stats.streams += 1
        stats.categories[category_of(stream)] = stats.categories.get(category_of(stream), 0) + 1
        cases = tuple(sorted({str(u.get("c")) for u in doc.get("u") or ()}))
        if category is not None and category_of(stream) != category:
            continue
        if unfold_case is not None and unfold_case not in cases:
            continue
        stats.matching.append(StreamSummary(stream, int(doc.get("n", 0)), events, cases))
    return stats
