"""The drawer/cabinet/catalog model of the MessageHub design, as pure values and transitions.

Sequence numbers are per recipient: one `Ledger` document per recipient hands out
strictly ascending numbers and drawer slots for every cabinet of that recipient in a
single compare-and-swap, so order within a recipient is total (FIFO across message types
too) and any number of workers may save concurrently. The ledger also holds the seed's
maximum-sequence-number fence: a save claims its range, writes, then releases the claim;
the fence is the highest number below every pending claim. A running save renews its claim's
lease; a claim whose lease expires (a crashed save) is voided: readers skip its numbers forever
and a retry places the events again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from app.dataavailable import DataAvailable
from app.hub.counts import Counts, add_counts, count_by_domain
from app.hub.voids import VoidRanges, add_void, is_void, void_ranges

__all__ = [
    "Allocation",
    "CabinetKey",
    "CatalogEntry",
    "Claim",
    "DeferredAck",
    "DrawerHead",
    "DrawerState",
    "Ledger",
    "Placement",
    "StoredEvent",
    "abandon",
    "acknowledge_drawer",
    "allocate",
    "apply_deferred",
    "content_hash",
    "reconcile_catalog",
    "release",
    "renew",
    "save_into_drawer",
    "stable_hash",
]


@dataclass(frozen=True, slots=True, order=True)
class CabinetKey:
    """Recipient + origin domain + message type: the kind of events a cabinet's drawers hold."""

    recipient: str
    domain: str
    message_type: str

    @classmethod
    def of(cls, event: DataAvailable) -> CabinetKey:
        return cls(event.recipient, event.origin, event.message_type)

    @property
    def value(self) -> str:
        """The drawers' partition key."""
        return f"{self.recipient}|{self.domain}|{self.message_type}"

    @property
    def catalog_partition(self) -> str:
        return catalog_partition(self.recipient, self.domain)


def catalog_partition(recipient: str, domain: str) -> str:
    return f"{recipient}|{domain}"


def stable_hash(text: str) -> int:
    """The same number for the same text in every process (BLAKE2b; Python's hash() is salted)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def content_hash(event: DataAvailable) -> str:
    """What 'same content' means for idempotent saves: every field of the event, id included.

    Not the batch item id: that names the delivery (a re-run of the same input is tracked by a
    new batch), not the event, so a re-run is a duplicate, not a conflict.
    """
    parts = (
        event.id,
        event.recipient,
        event.origin,
        event.message_type,
        str(event.weight),
        "1" if event.bundleable else "0",
    )
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=12).hexdigest()


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """A DataAvailable placed in a drawer at a sequence number."""

    event: DataAvailable
    seq: int
    drawer_id: str


@dataclass(frozen=True, slots=True)
class Claim:
    token: str
    first_seq: int
    last_seq: int
    lease_until_s: float
    domains: Counts = ()  # the claim's events per domain: counted as saved when it is released


@dataclass(frozen=True, slots=True)
class DrawerHead:
    """The last (only fillable) drawer of a cabinet, as the ledger knows it."""

    drawer_id: str
    ordinal: int
    used: int


@dataclass(frozen=True, slots=True)
class Ledger:
    recipient: str
    next_seq: int = 1
    claims: tuple[Claim, ...] = ()
    voids: VoidRanges = ()  # sorted, disjoint, coalesced (app/hub/voids.py)
    heads: dict[str, DrawerHead] = field(default_factory=dict)  # by CabinetKey.value
    containers: int = 1  # event containers the recipient's drawers spread over, fixed at its first save
    # Events saved (claims released) per domain since the ledger was created; `counting` False for
    # a ledger an older version created or wrote (it kept no count): depth is then queried.
    saved: Counts = ()
    counting: bool = True

    @property
    def fence(self) -> int:
        """Highest sequence number whose save has finished (every lower one has too)."""
        if self.claims:
            return min(c.first_seq for c in self.claims) - 1
        return self.next_seq - 1

    def drawer_container(self, cabinet: CabinetKey, ordinal: int) -> int:
        """The event container of a cabinet's drawer: consecutive drawers go to consecutive containers."""
        if self.containers == 1:
            return 0
        return (stable_hash(cabinet.value) + ordinal) % self.containers

    def is_void(self, seq: int) -> bool:
        return is_void(self.voids, seq)

    def claim_of(self, seq: int) -> Claim | None:
        return next((c for c in self.claims if c.first_seq <= seq <= c.last_seq), None)

    def reap(self, now_s: float) -> Ledger:
        """Void the claims of saves that outlived their lease (crashed workers)."""
        expired = [c for c in self.claims if c.lease_until_s < now_s]
        if not expired:
            return self
        return replace(
            self,
            claims=tuple(c for c in self.claims if c.lease_until_s >= now_s),
            voids=void_ranges((*self.voids, *((c.first_seq, c.last_seq, now_s) for c in expired))),
        )


@dataclass(frozen=True, slots=True)
class Placement:
    """A run of a cabinet's events going into one drawer, in order."""

    cabinet: CabinetKey
    drawer_id: str
    ordinal: int
    new_drawer: bool
    events: tuple[StoredEvent, ...]


@dataclass(frozen=True, slots=True)
class Allocation:
    token: str
    first_seq: int
    last_seq: int
    placements: tuple[Placement, ...]


def allocate(
    ledger: Ledger,
    events: Sequence[DataAvailable],
    *,
    token: str,
    capacity: int,
    now_s: float,
    lease_s: float,
    new_drawer_id: Callable[[], str],
) -> tuple[Ledger, Allocation]:
    """Give `events` (one recipient, in order) sequence numbers and drawer slots, and claim them."""
    if not events:
        raise ValueError("allocate needs at least one event")
    ledger = ledger.reap(now_s)
    heads = dict(ledger.heads)
    runs: dict[tuple[str, str], list[StoredEvent]] = {}
    meta: dict[str, tuple[CabinetKey, int, bool]] = {}
    seq = ledger.next_seq
    for event in events:
        cabinet = CabinetKey.of(event)
        head = heads.get(cabinet.value)
        if head is None or head.used >= capacity:
            ordinal = 0 if head is None else head.ordinal + 1
            head = DrawerHead(new_drawer_id(), ordinal, 0)
            meta[head.drawer_id] = (cabinet, ordinal, True)
        meta.setdefault(head.drawer_id, (cabinet, head.ordinal, False))
        heads[cabinet.value] = replace(head, used=head.used + 1)
        runs.setdefault((cabinet.value, head.drawer_id), []).append(StoredEvent(event, seq, head.drawer_id))
        seq += 1
    placements = tuple(
        Placement(meta[drawer][0], drawer, meta[drawer][1], meta[drawer][2], tuple(run))
        for (_, drawer), run in runs.items()
    )
    claim = Claim(token, ledger.next_seq, seq - 1, now_s + lease_s, count_by_domain(events))
    updated = replace(ledger, next_seq=seq, claims=(*ledger.claims, claim), heads=heads)
    return updated, Allocation(token, claim.first_seq, claim.last_seq, placements)


def abandon(ledger: Ledger, token: str, *, now_s: float) -> Ledger | None:
    """Void a save's claim before it wrote any event (it met index entries it did not expect).

    Its sequence numbers stay unused; None when the claim was already voided or released.
    """
    claim = next((c for c in ledger.claims if c.token == token), None)
    if claim is None:
        return None
    return replace(
        ledger,
        claims=tuple(c for c in ledger.claims if c.token != token),
        voids=add_void(ledger.voids, claim.first_seq, claim.last_seq, now_s),
    )


def release(ledger: Ledger, token: str) -> Ledger | None:
    """Drop a finished save's claim (advancing the fence) and count its events as saved; None
    when the claim was voided meanwhile."""
    claim = next((c for c in ledger.claims if c.token == token), None)
    if claim is None:
        return None
    claims = tuple(c for c in ledger.claims if c.token != token)
    return replace(ledger, claims=claims, saved=add_counts(ledger.saved, claim.domains))


def renew(ledger: Ledger, token: str, until_s: float) -> Ledger | None:
    """Extend a running save's claim to `until_s`; None when the claim was voided or released."""
    if not any(c.token == token for c in ledger.claims):
        return None
    return replace(
        ledger,
        claims=tuple(
            replace(c, lease_until_s=max(c.lease_until_s, until_s)) if c.token == token else c
            for c in ledger.claims
        ),
    )


@dataclass(frozen=True, slots=True)
class DrawerState:
    """An ordered container of at most `capacity` events of one cabinet.

    `ack_seq` is the position: every event at or below it is acknowledged.
    `unacked_from` is the first unacknowledged sequence number, None when the drawer has none
    (then the next save into it adds a catalog entry).
    """

    drawer_id: str
    cabinet: CabinetKey
    ordinal: int
    last_seq: int = 0
    ack_seq: int = 0
    unacked_from: int | None = None
    used: int = 0
    acked: int = 0  # events acknowledged so far; used - acked is the drawer's backlog


def save_into_drawer(drawer: DrawerState, placement: Placement) -> tuple[DrawerState, int | None]:
    """The drawer after a save wrote `placement`, and the catalog entry's sequence number if one is due."""
    first = placement.events[0].seq
    last = placement.events[-1].seq
    catalog_seq: int | None = None
    unacked_from = drawer.unacked_from
    if first > drawer.ack_seq and (unacked_from is None or first < unacked_from):
        unacked_from = first
        catalog_seq = first
    updated = replace(
        drawer,
        last_seq=max(drawer.last_seq, last),
        unacked_from=unacked_from,
        used=drawer.used + len(placement.events),
    )
    return updated, catalog_seq


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """Points a recipient+domain at a drawer holding unacknowledged events from `seq` on."""

    cabinet: CabinetKey
    drawer_id: str
    seq: int

    @property
    def entry_id(self) -> str:
        return f"{self.drawer_id}:{self.seq}"


def acknowledge_drawer(
    drawer: DrawerState,
    bundle_last_seq: int,
    next_seq_seen_at_peek: int | None,
    next_seq_now: int | None,
    bundle_events: int = 0,
) -> DrawerState:
    """The seed's acknowledge table, for one drawer the bundle touched.

    - the peek left events in the drawer (`next_seq_seen_at_peek`): point at the next one;
    - the peek emptied the drawer but a save added events since (`next_seq_now`): point at them;
    - the peek emptied the drawer and nothing came since: no entry; the next save adds it.
    The caller adds a catalog entry when the result's `unacked_from` is not None.
    `next_seq_now` is the first sequence number above `bundle_last_seq` currently in the drawer.
    """
    if bundle_last_seq <= drawer.ack_seq:
        return drawer  # acknowledged before (a repeated dequeue): nothing moves back
    ack_seq = bundle_last_seq
    if next_seq_seen_at_peek is not None and next_seq_seen_at_peek > ack_seq:
        unacked_from: int | None = next_seq_seen_at_peek
    elif drawer.last_seq > ack_seq:
        unacked_from = next_seq_now
    else:
        unacked_from = None
    return replace(drawer, ack_seq=ack_seq, unacked_from=unacked_from, acked=drawer.acked + bundle_events)


@dataclass(frozen=True, slots=True)
class DeferredAck:
    """A drawer's acknowledgement recorded in its actor's stream and not yet written to the drawer.

    Only an acknowledgement that leaves events in the drawer is deferred (`next_seq` is never
    None), so the drawer's catalog entry stays at or below its first unacknowledged event and a
    save into it has no entry to add, written or not. `acked` is the drawer's total count."""

    drawer_id: str
    ack_seq: int
    next_seq: int
    acked: int


def apply_deferred(drawer: DrawerState, deferred: DeferredAck | None) -> DrawerState:
    """The drawer as its acknowledgements made it: the stored document with the deferred one applied.

    Only the actor's acknowledgements move `ack_seq`, and one that writes the drawer writes every
    deferred one with it, so a stored position at or beyond the deferred one already holds it."""
    if deferred is None or deferred.ack_seq <= drawer.ack_seq:
        return drawer
    return replace(drawer, ack_seq=deferred.ack_seq, unacked_from=deferred.next_seq, acked=deferred.acked)


def reconcile_catalog(
    entries: Sequence[CatalogEntry],
    open_drawers: Sequence[DrawerState],
    current: Sequence[DrawerState] | None = None,
) -> tuple[int | None, list[CatalogEntry], list[CatalogEntry]]:
    """Check one cabinet's catalog entries against its drawers (as a peek reads them).

    Returns the cabinet's true first unacknowledged sequence number (None: nothing open), the
    entries that no longer point at a drawer's first unacknowledged event (left by a dequeue or
    a crash; the peek deletes them), and the entries missing for open drawers (the peek adds them).
    The entries are checked against the drawers as stored; the first event is taken from
    `current`, the same drawers with the actor's deferred acknowledgements applied (default: as
    stored), since a deferred position leaves the drawer's entry where it is.
    """
    wanted = {(d.drawer_id, d.unacked_from): d for d in open_drawers if d.unacked_from is not None}
    have = {(e.drawer_id, e.seq) for e in entries}
    stale = [e for e in entries if (e.drawer_id, e.seq) not in wanted]
    missing = [
        CatalogEntry(d.cabinet, d.drawer_id, seq)
        for (_, seq), d in wanted.items()
        if (d.drawer_id, seq) not in have
    ]
    firsts = (d.unacked_from for d in (open_drawers if current is None else current))
    first = min((seq for seq in firsts if seq is not None), default=None)
    return first, stale, missing
