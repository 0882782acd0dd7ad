"""Event counts per domain, kept where the hub already writes (pure): a recipient's ledger counts
the events of each released save, the actor's bundle stream those of each dequeued bundle, and a
recipient's depth is the difference, exact and without reading a single event."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

__all__ = ["Counts", "add_counts", "count_by_domain", "depth_of"]

Counts = tuple[tuple[str, int], ...]  # (domain, count), sorted by domain


class _HasOrigin(Protocol):
    @property
    def origin(self) -> str: ...


def _counts(totals: Mapping[str, int]) -> Counts:
    return tuple(sorted((domain, n) for domain, n in totals.items() if n))


def count_by_domain(events: Iterable[_HasOrigin]) -> Counts:
    totals: dict[str, int] = {}
    for event in events:
        totals[event.origin] = totals.get(event.origin, 0) + 1
    return _counts(totals)


def add_counts(counts: Counts, more: Counts) -> Counts:
    totals = dict(counts)
    for domain, n in more:
        totals[domain] = totals.get(domain, 0) + n
    return _counts(totals)


def depth_of(saved: Counts, acknowledged: Counts) -> dict[str, int]:
    """Saved and not yet acknowledged, per domain (domains with none left out)."""
    totals = dict(saved)
    for domain, n in acknowledged:
        totals[domain] = totals.get(domain, 0) - n
    return {domain: n for domain, n in sorted(totals.items()) if n > 0}
