"""What a peek learned of a recipient's cabinets, kept for the actor's next peek.

An actor drains the hub bundle after bundle: peek, dequeue, peek again. A full peek reads the
catalog (one query per domain) to order the cabinets by their oldest event, and a cabinet's
open drawers (one query) before reading their events. The board keeps what that peek learned:
per cabinet the oldest unacknowledged sequence number it knows (exact once the cabinet's drawers
were read, else the catalog's, which is never above the truth for a cabinet with an entry) and
the drawers read. After this process dequeued the bundle it peeked, the next peek starts from the
board when nothing it relied on can have changed:

- the actor's dequeue count is the one this process left (no dequeue elsewhere moved drawers);
- events that became visible since (the fence moved) have higher sequence numbers than any event
  that was visible when the board was read, so a cabinet the board knows to hold a visible event
  stays older than every cabinet it does not know;
- a bundle read from the board's drawers that does not close before their events run out is
  formed again by a full peek when the fence moved (a drawer opened since may continue it).

It also keeps, per drawer, the events its last read returned beyond the bundle (a query reads a
page of up to HUB_READ_PAGE_SIZE events and a bundle of the sample takes about ten): the next
bundle starts from them and queries only for what lies beyond.

The drawers are kept as this process acknowledged them at the dequeue (written, or with the
position recorded in the actor's stream); a save that wrote one since makes the acknowledge's
If-Match fail once and read it again, as for any peek.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from app.hub.model import CabinetKey, CatalogEntry, DrawerState, Ledger, StoredEvent

__all__ = ["CabinetBoard", "Drawers"]

Drawers = tuple[tuple[DrawerState, str], ...]  # a cabinet's drawers in order, with their etags


@dataclass(frozen=True, slots=True)
class CabinetBoard:
    domains: tuple[str, ...]
    fence: int  # the ledger's fence when the catalog was read
    oldest: Mapping[CabinetKey, int]  # cabinets holding visible unacknowledged events
    entries: Mapping[CabinetKey, tuple[CatalogEntry, ...]]  # as the catalog listed them
    drawers: Mapping[CabinetKey, Drawers] = field(default_factory=dict)  # cabinets whose drawers were read
    runs: Mapping[str, tuple[StoredEvent, ...]] = field(default_factory=dict)  # per drawer: read, not taken
    bundle_id: str = ""  # the bundle formed from the board last
    dequeues: int | None = None  # the actor's dequeue count after that bundle's dequeue; None before
    ledger: Ledger | None = None  # the recipient's ledger the catalog was read under (its fence)

    @classmethod
    def from_catalog(
        cls,
        domains: Sequence[str],
        fence: int,
        entries: Sequence[CatalogEntry],
        ledger: Ledger | None = None,
    ) -> CabinetBoard:
        by_cabinet: dict[CabinetKey, list[CatalogEntry]] = {}
        for entry in entries:
            by_cabinet.setdefault(entry.cabinet, []).append(entry)
        oldest = {cabinet: min(e.seq for e in listed) for cabinet, listed in by_cabinet.items()}
        by_cabinet_entries = {c: tuple(e) for c, e in by_cabinet.items()}
        return cls(tuple(domains), fence, oldest, by_cabinet_entries, ledger=ledger)

    def serves(self, domains: Sequence[str], dequeues: int) -> bool:
        """Whether the actor's next peek for `domains` may start from this board."""
        return self.dequeues == dequeues and self.domains == tuple(domains)

    def next_cabinet(self, fence: int) -> CabinetKey | None:
        """The cabinet holding the oldest visible event the board knows of."""
        visible = [(seq, cabinet) for cabinet, seq in self.oldest.items() if seq <= fence]
        return min(visible)[1] if visible else None

    def checked(self, cabinet: CabinetKey, drawers: Drawers, first: int | None) -> CabinetBoard:
        """The board once the cabinet's open drawers were read (first: its true oldest)."""
        oldest = {c: s for c, s in self.oldest.items() if c != cabinet}
        if first is not None:
            oldest[cabinet] = first
        return replace(self, oldest=oldest, drawers={**self.drawers, cabinet: drawers})

    def emptied(self, cabinet: CabinetKey) -> CabinetBoard:
        """The board without a cabinet that showed no visible event (all voided by crashed saves)."""
        return replace(self, oldest={c: s for c, s in self.oldest.items() if c != cabinet})

    def open_drawers(self, cabinet: CabinetKey, fence: int) -> list[DrawerState]:
        """The cabinet's drawers holding visible unacknowledged events, in order."""
        return [d for d, _ in self.drawers[cabinet] if d.unacked_from is not None and d.unacked_from <= fence]

    def peeked(
        self, bundle_id: str, cabinet: CabinetKey, rest: Mapping[str, tuple[StoredEvent, ...]]
    ) -> CabinetBoard:
        """The board once a bundle was formed from `cabinet`, with the events its drawers' reads
        left (each run holds every event of its drawer from the first not taken on)."""
        mine = {d.drawer_id for d, _ in self.drawers.get(cabinet, ())}
        runs = {drawer: run for drawer, run in self.runs.items() if drawer not in mine}
        runs.update({drawer: run for drawer, run in rest.items() if drawer in mine})
        return replace(self, bundle_id=bundle_id, dequeues=None, runs=runs)

    def dequeued(
        self, cabinet: CabinetKey, written: Mapping[str, tuple[DrawerState, str] | None], dequeues: int
    ) -> CabinetBoard:
        """The board once its bundle is acknowledged: the cabinet's drawers as the acknowledge
        wrote them (None: drained and deleted), its oldest event from them, the dequeue count."""
        kept: list[tuple[DrawerState, str]] = []
        for drawer, etag in self.drawers[cabinet]:
            now = written.get(drawer.drawer_id, (drawer, etag))
            if now is not None:
                kept.append(now)
        starts = [d.unacked_from for d, _ in kept if d.unacked_from is not None]
        board = self.checked(cabinet, tuple(kept), min(starts, default=None))
        return replace(board, dequeues=dequeues)
