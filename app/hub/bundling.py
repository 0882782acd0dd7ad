"""Bundle formation over a cabinet reader: the domain layer of GetNextUnacknowledged.

Events are taken in sequence order while the summed weight stays within the bundle limit
(50 MB); a non-bundleable event travels alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.dataavailable import MAX_WEIGHT_BYTES
from app.hub.model import CabinetKey, DrawerState, StoredEvent

__all__ = ["MAX_BUNDLE_EVENTS", "BundleBuilder", "BundleRef", "DrawerSlice"]

# The seed's worst case: 50 MB of the smallest (1 KB) payloads.
MAX_BUNDLE_EVENTS = 51_200


@dataclass(frozen=True, slots=True)
class DrawerSlice:
    """The part of one drawer a bundle covers, and what the peek saw after it (for Acknowledge)."""

    drawer_id: str
    first_seq: int
    last_seq: int
    next_seq: int | None  # the drawer's next unacknowledged event seen by the peek, if any
    seen: DrawerState  # the drawer document as the peek read it (its ordinal places its events) ...
    etag: str = ""  # ... and its etag: an unchanged drawer is acknowledged with one If-Match write
    count: int = 0  # events of this drawer in the bundle


@dataclass(frozen=True, slots=True)
class BundleRef:
    """A peeked bundle as the actor's stream records it: enough to re-read and to acknowledge it."""

    bundle_id: str
    cabinet: CabinetKey
    slices: tuple[DrawerSlice, ...]
    event_count: int
    weight: int

    @property
    def domain(self) -> str:
        return self.cabinet.domain


@dataclass
class BundleBuilder:
    """Accumulates events offered in sequence order until the bundle is full."""

    max_weight: int = MAX_WEIGHT_BYTES
    max_events: int = MAX_BUNDLE_EVENTS
    events: list[StoredEvent] = field(default_factory=list)
    weight: int = 0
    closed: bool = False

    def offer(self, stored: StoredEvent) -> bool:
        """Take the event if it fits; once an event is refused (or travels alone) the bundle is closed."""
        if self.closed:
            return False
        event = stored.event
        if not self.events:
            self._take(stored)
            self.closed = not event.bundleable or len(self.events) >= self.max_events
            return True
        if (
            not event.bundleable
            or not self.events[0].event.bundleable
            or self.weight + event.weight > self.max_weight
        ):
            self.closed = True
            return False
        self._take(stored)
        self.closed = len(self.events) >= self.max_events or self.weight >= self.max_weight
        return True

    def _take(self, stored: StoredEvent) -> None:
        self.events.append(stored)
        self.weight += stored.event.weight

    def slices(
        self, next_seen: Mapping[str, int], drawers: Mapping[str, tuple[DrawerState, str]]
    ) -> tuple[DrawerSlice, ...]:
        """Per drawer (in order) the covered range; `next_seen` maps drawer -> first event not taken,
        `drawers` drawer -> (document state, etag) as read by the peek."""
        ranges: dict[str, list[int]] = {}
        for stored in self.events:
            bounds = ranges.setdefault(stored.drawer_id, [stored.seq, stored.seq, 0])
            bounds[1] = stored.seq
            bounds[2] += 1
        slices = []
        for drawer, (first, last, count) in ranges.items():
            seen, etag = drawers[drawer]
            slices.append(DrawerSlice(drawer, first, last, next_seen.get(drawer), seen, etag, count))
        return tuple(slices)
