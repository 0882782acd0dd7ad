"""The DataAvailable repository of seed 000 on Cosmos DB: Save, GetNextUnacknowledged, Acknowledge."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from app.crashpoints import crash_point
from app.dataavailable import DataAvailable
from app.errors import ServiceUnavailable
from app.hub.bundling import BundleBuilder, BundleRef
from app.hub.documents import (
    EVENT_FIELDS,
    catalog_doc,
    catalog_from_doc,
    drawer_doc,
    drawer_from_doc,
    event_doc,
    event_from_doc,
    index_doc,
    ledger_doc,
    ledger_from_doc,
)
from app.hub.errors import SaveLeaseLost
from app.hub.known import KnownDocs, Recent
from app.hub.model import (
    Allocation,
    CabinetKey,
    CatalogEntry,
    DeferredAck,
    DrawerState,
    Ledger,
    Placement,
    StoredEvent,
    abandon,
    acknowledge_drawer,
    allocate,
    apply_deferred,
    catalog_partition,
    content_hash,
    reconcile_catalog,
    release,
    renew,
    save_into_drawer,
)
from app.hub.ports import HubStore
from app.hub.reader import CabinetRead, read_cabinet
from app.hub.saving import IndexEntry, SavePlan, plan_save
from app.hub.views import CabinetBoard
from app.waiting import after_conflict

__all__ = ["HubRepository", "RepositoryOptions", "SaveResult"]

log = logging.getLogger(__name__)

FIRST_AFTER_PAGE = 20
MAX_CAS_ATTEMPTS = 50
MAX_SAVE_PASSES = 5  # plans of one save that may meet index entries they did not know of
LOOKUP_CONCURRENCY = 64  # index point reads in flight per save
# Drawers of one actor whose acknowledgement may wait in its stream; beyond, a dequeue writes.
MAX_DEFERRED_DRAWERS = 16

C = TypeVar("C")  # the store's container handle


@dataclass(frozen=True, slots=True)
class RepositoryOptions:
    drawer_capacity: int = 10_000
    parallel_drawers: int = 6
    page_size: int = 1000
    lease_s: float = 15.0  # renewed every third of it while the save runs
    save_recipients: int = 32  # recipients saved at once; the others wait before they claim
    defer_acks: bool = True  # a dequeue may record a drawer's position in the actor's stream


@dataclass(frozen=True, slots=True)
class SaveResult:
    saved: int
    duplicates: int


@dataclass(frozen=True, slots=True)
class Candidate:
    """A bundle formed by GetNextUnacknowledged, not yet recorded in the actor's stream."""

    ref: BundleRef
    events: tuple[StoredEvent, ...]


class HubRepository(Generic[C]):
    """Save, GetNextUnacknowledged and Acknowledge on any HubStore (Cosmos DB, or in memory)."""

    def __init__(self, io: HubStore[C], options: RepositoryOptions) -> None:
        self.io = io
        self.options = options
        # What this process last read or wrote of the ledgers and drawers it saves into: the
        # worker that owns a recipient starts each compare-and-swap from it instead of a read.
        self._ledgers: KnownDocs[Ledger] = Recent()
        self._drawers: KnownDocs[DrawerState] = Recent()
        # Per actor, what its last peek here learned of its cabinets (tagged with that bundle's id).
        self._boards: KnownDocs[CabinetBoard] = Recent()
        self._saving = asyncio.Semaphore(options.save_recipients)

    # ---- Save ---------------------------------------------------------------------------------

    async def save(self, events: Sequence[DataAvailable]) -> SaveResult:
        """Save events (in order); recipients in parallel, each recipient's order kept."""
        by_recipient: dict[str, list[DataAvailable]] = {}
        for event in events:
            by_recipient.setdefault(event.recipient, []).append(event)
        results = await asyncio.gather(*(self._save_in_turn(r, evs) for r, evs in by_recipient.items()))
        return SaveResult(sum(r.saved for r in results), sum(r.duplicates for r in results))

    async def _save_in_turn(self, recipient: str, events: list[DataAvailable]) -> SaveResult:
        """Save once fewer than `save_recipients` saves of this process are running. A save claims
        its numbers first and holds the claim until its last write: claims taken by a thousand
        saves queued behind the same write gate were renewed every few seconds (a tenth of a busy
        worker's CPU) and held the recipients' fences back while they waited."""
        async with self._saving:
            return await self._save_recipient(recipient, events)

    async def _save_recipient(self, recipient: str, events: list[DataAvailable]) -> SaveResult:
        """Claim sequence numbers, write the idempotency index, the events and drawers, release.

        The index is written by creating one document per event id: a create that finds one
        already there means a duplicate (or a racing save), found without reading the index first.
        Only when the first event's entry exists (a redelivery) is the whole index read up front:
        a redelivery found by the creates would give its claim back as a void range, and the
        ledger keeps every void range.
        """
        ids = [e.id for e in events]
        index = await self._lookup_index(recipient, ids) if await self._indexed(recipient, ids[0]) else {}
        for _ in range(MAX_SAVE_PASSES):
            claimed = await self._claim(recipient, events, index)
            if isinstance(claimed, SaveResult):
                return claimed
            plan, allocation, ledger = claimed
            async with self._claim_kept(recipient, allocation.token):
                written = await self._write_index(recipient, plan.to_place, allocation, index)
                if written:
                    await asyncio.gather(
                        *(
                            self._write_placement(self.io.events(ledger, p.cabinet, p.ordinal), p, ledger)
                            for p in allocation.placements
                        )
                    )
            if written:
                await self._release(recipient, allocation.token)
                return SaveResult(len(plan.to_place), plan.duplicates)
            # Entries this save did not know of (a redelivery mixed with new events, or a racing
            # save): give the claim back as void and plan again from the whole index.
            await self._abandon(recipient, allocation.token)
            index = await self._lookup_index(recipient, ids)
        raise ServiceUnavailable(f"the event index of {recipient} kept changing; save not finished")

    async def _claim(
        self, recipient: str, events: list[DataAvailable], index: dict[str, IndexEntry]
    ) -> tuple[SavePlan, Allocation, Ledger] | SaveResult:
        """Plan against the index and claim sequence numbers in the ledger (compare-and-swap).

        The first attempt starts from the ledger this process knows, unless the plan must judge
        index entries by it (then only a fresh read tells which claims are still held)."""
        for attempt in range(MAX_CAS_ATTEMPTS):
            await after_conflict(attempt, MAX_CAS_ATTEMPTS)
            ledger, etag = await self._read_ledger(recipient, known=attempt == 0 and not index)
            ledger = ledger.reap(time.time())
            plan = plan_save(events, index, ledger)
            if not plan.to_place:
                return SaveResult(0, plan.duplicates)
            updated, allocation = allocate(
                ledger,
                plan.to_place,
                token=uuid.uuid4().hex,
                capacity=self.options.drawer_capacity,
                now_s=time.time(),
                lease_s=self.options.lease_s,
                new_drawer_id=lambda: str(uuid.uuid4()),
            )
            crash_point("hub.save.claim")
            if await self._write_ledger(updated, etag):
                return plan, allocation, updated
        raise ServiceUnavailable(f"ledger of {recipient} kept changing; save not started")

    async def _indexed(self, recipient: str, event_id: str) -> bool:
        return await self.io.read(self.io.ids, event_id, recipient) is not None

    async def _lookup_index(self, recipient: str, ids: Sequence[str]) -> dict[str, IndexEntry]:
        """The index entries of `ids`, by point reads: constant cost per id on any endpoint (a query
        would be scanned over the whole container by the embedded one)."""
        gate = asyncio.Semaphore(LOOKUP_CONCURRENCY)

        async def entry(event_id: str) -> IndexEntry | None:
            async with gate:
                doc = await self.io.read(self.io.ids, event_id, recipient)
            return None if doc is None else IndexEntry(doc["h"], doc["seq"], doc["tok"], doc["_etag"])

        unique_ids = list(dict.fromkeys(ids))
        found = await asyncio.gather(*(entry(i) for i in unique_ids))
        return {e_id: e for e_id, e in zip(unique_ids, found, strict=True) if e is not None}

    async def _write_index(
        self,
        recipient: str,
        events: Sequence[DataAvailable],
        allocation: Allocation,
        known: dict[str, IndexEntry],
    ) -> bool:
        """Index every event of the claim; False when an entry turned up that the plan did not know.

        Entries left by voided saves (in `known`) are taken over under If-Match, the rest created.
        """
        seqs = {s.event.id: s.seq for p in allocation.placements for s in p.events}
        fresh: list[dict[str, Any]] = []
        takeovers: list[tuple[dict[str, Any], str]] = []
        for event in events:
            doc = index_doc(event.id, recipient, content_hash(event), seqs[event.id], allocation.token)
            entry = known.get(event.id)
            if entry is None:
                fresh.append(doc)
            else:
                takeovers.append((doc, entry.etag))
        crash_point("hub.save.index")
        results = await asyncio.gather(
            self.io.create_all_new(self.io.ids, recipient, fresh),
            *(self.io.replace_if_match(self.io.ids, doc, etag) for doc, etag in takeovers),
        )
        return all(results)

    async def _write_placement(self, events_container: C, placement: Placement, ledger: Ledger) -> None:
        """Events first, then the drawer (so a drawer never promises events that are not written),
        then the catalog entry a Peek finds the drawer by."""
        docs = [event_doc(s) for s in placement.events]
        crash_point("hub.save.events")
        await self.io.bulk_create(events_container, placement.drawer_id, docs)
        drawer, catalog_seq = await self._record_in_drawer(placement)
        if catalog_seq is None and drawer.unacked_from is not None and ledger.is_void(drawer.unacked_from):
            # The save that set the drawer's first unacknowledged event died before creating its
            # catalog entry (that event is void now): without the entry no Peek reaches the drawer.
            catalog_seq = drawer.unacked_from
        if catalog_seq is not None:
            entry = CatalogEntry(placement.cabinet, placement.drawer_id, catalog_seq)
            crash_point("hub.save.catalog")
            await self.io.create(self.io.catalog, catalog_doc(entry))  # exists already: fine

    async def _record_in_drawer(self, placement: Placement) -> tuple[DrawerState, int | None]:
        """Apply the placement to its drawer document under If-Match: the drawer as written, and
        the catalog seq if one is due."""
        empty = DrawerState(placement.drawer_id, placement.cabinet, placement.ordinal)
        known = self._drawers.get(placement.drawer_id)
        for attempt in range(MAX_CAS_ATTEMPTS):
            await after_conflict(attempt, MAX_CAS_ATTEMPTS)
            if placement.new_drawer and attempt == 0:
                current: tuple[DrawerState, str] | None = None
            elif known is not None and attempt == 0:
                current = known
            else:
                doc = await self.io.read(self.io.drawers, placement.drawer_id, placement.cabinet.value)
                current = None if doc is None else (drawer_from_doc(doc), doc["_etag"])
            drawer, catalog_seq = save_into_drawer(empty if current is None else current[0], placement)
            crash_point("hub.save.drawer")
            if current is None:
                etag = await self.io.create_tagged(self.io.drawers, drawer_doc(drawer))
            else:
                etag = await self.io.replace_tagged(self.io.drawers, drawer_doc(drawer), current[1])
            if etag is not None:
                self._drawers.put(drawer.drawer_id, drawer, etag)
                return drawer, catalog_seq
        self._drawers.drop(placement.drawer_id)
        raise ServiceUnavailable(f"drawer {placement.drawer_id} kept changing; save not finished")

    @contextlib.asynccontextmanager
    async def _claim_kept(self, recipient: str, token: str) -> AsyncIterator[None]:
        """Renew the claim every third of the lease while the save writes: a live save keeps it
        however slow its writes are, so the lease can be short, and a crashed save's claim (its
        events refused as SaveInProgress to a redelivery until then) expires within one lease."""
        stop = asyncio.Event()

        async def keep() -> None:
            lease_s = self.options.lease_s
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), lease_s / 3)
                    return
                try:
                    crash_point("hub.save.renew")
                    kept = await self._update_claim(
                        recipient, token, partial(renew, until_s=time.time() + lease_s)
                    )
                except Exception as exc:  # a failed write: try again at the next period
                    log.warning("hub: renewing the claim of a save for %s failed: %r", recipient, exc)
                    continue
                if not kept:
                    return  # voided meanwhile: the release says so

        keeper = asyncio.create_task(keep())
        try:
            yield
        finally:
            stop.set()
            await keeper

    async def _release(self, recipient: str, token: str) -> None:
        crash_point("hub.save.release")  # everything is written; the fence does not pass it yet
        if not await self._update_claim(recipient, token, release):
            raise SaveLeaseLost(f"save for {recipient} outlived its lease of {self.options.lease_s}s")

    async def _abandon(self, recipient: str, token: str) -> None:
        await self._update_claim(recipient, token, abandon)  # a claim already voided needs nothing

    async def _update_claim(
        self, recipient: str, token: str, change: Callable[[Ledger, str], Ledger | None]
    ) -> bool:
        """Apply `change` to the ledger under If-Match; False when the claim is no longer there.

        Starts from the ledger this process knows; a claim missing there is checked on a fresh read."""
        for attempt in range(MAX_CAS_ATTEMPTS):
            await after_conflict(attempt, MAX_CAS_ATTEMPTS)
            ledger, etag = await self._read_ledger(recipient, known=attempt == 0)
            changed = change(ledger, token)
            if changed is None:
                if attempt == 0:
                    continue  # the known ledger may be older than the claim: read it afresh
                return False
            if await self._write_ledger(changed, etag):
                return True
        raise ServiceUnavailable(f"ledger of {recipient} kept changing; fence not advanced")

    async def _read_ledger_reaped(self, recipient: str) -> Ledger:
        """The ledger with the claims of crashed saves voided and written back, so a reader's fence
        moves past them even when no save for this recipient comes again (the write makes a slow
        writer's late release fail, so events a reader treated as void never reappear)."""
        for attempt in range(MAX_CAS_ATTEMPTS):
            await after_conflict(attempt, MAX_CAS_ATTEMPTS)
            ledger, etag = await self._read_ledger(recipient)
            reaped = ledger.reap(time.time())
            if reaped == ledger or etag is None or await self._write_ledger(reaped, etag):
                return reaped
        raise ServiceUnavailable(f"ledger of {recipient} kept changing; read not started")

    async def _read_ledger(self, recipient: str, *, known: bool = False) -> tuple[Ledger, str | None]:
        """The recipient's ledger and etag: read (and remembered), or with `known` the version this
        process last read or wrote when it has one (only as the start of a compare-and-swap)."""
        if known and (remembered := self._ledgers.get(recipient)) is not None:
            return remembered
        doc = await self.io.read(self.io.ledgers, recipient, recipient)
        if doc is None:
            self._ledgers.drop(recipient)
            return self.io.new_ledger(recipient), None
        ledger = ledger_from_doc(doc)
        self._ledgers.put(recipient, ledger, doc["_etag"])
        return ledger, doc["_etag"]

    async def _write_ledger(self, ledger: Ledger, etag: str | None) -> bool:
        if etag is None:
            written = await self.io.create_tagged(self.io.ledgers, ledger_doc(ledger))
        else:
            written = await self.io.replace_tagged(self.io.ledgers, ledger_doc(ledger), etag)
        if written is None:
            self._ledgers.drop(ledger.recipient)
            return False
        self._ledgers.put(ledger.recipient, ledger, written)
        return True

    # ---- GetNextUnacknowledged ------------------------------------------------------------------

    async def next_unacknowledged(
        self,
        recipient: str,
        domains: Sequence[str],
        bundle_id: str,
        builder: BundleBuilder,
        dequeues: int | None = None,
        deferred: Mapping[str, DeferredAck] | None = None,
    ) -> Candidate | None:
        """The next bundle: from the cabinet holding the recipient's oldest visible event.

        With `dequeues` (the actor's dequeue count), what this peek learned of the cabinets is
        kept, and the peek after this bundle's dequeue starts from it (app/hub/views.py).
        `deferred`: the actor's acknowledgements not yet written to its drawers."""
        remembered = self._boards.get(recipient)
        self._boards.drop(recipient)
        board = None
        if dequeues is not None and remembered is not None and remembered[0].serves(domains, dequeues):
            board = remembered[0]
        # A board keeps the ledger its catalog was read under. Its fence holds for forming the next
        # bundle (events that became visible since are all newer than every event below it), so
        # the ledger is read again only when the board runs out: no cabinet left below its fence,
        # or a bundle still open when its drawers' events ran out (a newer event may continue it).
        if board is not None and board.ledger is not None:
            ledger, current = board.ledger, False
        else:
            ledger, current = await self._read_ledger_reaped(recipient), True
        fence = ledger.fence
        fresh = board is None
        if board is None:
            board = await self._read_catalog(recipient, domains, ledger)
        while True:
            cabinet = board.next_cabinet(fence)
            if cabinet is None:
                if not current:
                    ledger, current = await self._read_ledger_reaped(recipient), True
                    fence = ledger.fence
                    continue
                if fresh or board.fence == fence:
                    return None
                board, fresh = await self._read_catalog(recipient, domains, ledger), True
                continue
            if cabinet not in board.drawers:
                board = await self._check(board, cabinet, deferred or {})
                continue
            read = await self._read(ledger, board.open_drawers(cabinet, fence), builder, board.runs)
            if not builder.closed and not current:
                ledger, current = await self._read_ledger_reaped(recipient), True
                fence = ledger.fence
            if not fresh and not builder.closed and board.fence != fence:
                # A drawer opened since the board was read may continue this bundle.
                board, fresh = await self._read_catalog(recipient, domains, ledger), True
                builder = BundleBuilder(builder.max_weight, builder.max_events)
                continue
            if read.events:
                break
            # All its unacknowledged events are voided (crashed saves): go on to the next cabinet
            # rather than answer "nothing" for the whole domain.
            board = board.emptied(cabinet)
        slices = builder.slices(
            read.next_seen, dict((d.drawer_id, (d, t)) for d, t in board.drawers[cabinet])
        )
        ref = BundleRef(bundle_id, cabinet, slices, len(read.events), builder.weight)
        if dequeues is not None:
            self._boards.put(recipient, board.peeked(bundle_id, cabinet, read.rest), bundle_id)
        return Candidate(ref, read.events)

    async def _read_catalog(self, recipient: str, domains: Sequence[str], ledger: Ledger) -> CabinetBoard:
        """The recipient's cabinets as the catalog lists them (entries up to the ledger's fence)."""
        fence = ledger.fence
        sql = "SELECT * FROM c WHERE c.pk = @pk AND c.seq <= @fence"
        found = await asyncio.gather(
            *(
                self.io.query(self.io.catalog, sql, p, {"@pk": p, "@fence": fence})
                for p in (catalog_partition(recipient, d) for d in domains)
            )
        )
        entries = [catalog_from_doc(doc) for docs in found for doc in docs]
        return CabinetBoard.from_catalog(domains, fence, entries, ledger)

    async def _check(
        self, board: CabinetBoard, cabinet: CabinetKey, deferred: Mapping[str, DeferredAck]
    ) -> CabinetBoard:
        """Read the cabinet's open drawers and fix its catalog entries (stale ones removed, missing
        ones added): the board then knows the cabinet's true oldest event.

        The catalog is checked against the drawers as stored: a deferred acknowledgement leaves the
        drawer's entry where it is, at or below its first unacknowledged event, as a written one
        does until a peek checks it."""
        stored = await self._open_drawers(cabinet)
        drawers = [(apply_deferred(d, deferred.get(d.drawer_id)), etag) for d, etag in stored]
        first, stale, missing = reconcile_catalog(
            board.entries.get(cabinet, ()), [d for d, _ in stored], [d for d, _ in drawers]
        )
        # Added before any is removed: a drawer with events left keeps an entry at every moment.
        if missing:
            crash_point("hub.peek.catalog_added")
            await asyncio.gather(*(self.io.create(self.io.catalog, catalog_doc(e)) for e in missing))
        if stale:
            crash_point("hub.peek.catalog_removed")
            await asyncio.gather(
                *(self.io.delete(self.io.catalog, e.entry_id, cabinet.catalog_partition) for e in stale)
            )
        return board.checked(cabinet, tuple(drawers), first)

    async def _read(
        self,
        ledger: Ledger,
        drawers: Sequence[DrawerState],
        builder: BundleBuilder,
        runs: Mapping[str, Sequence[StoredEvent]] | None = None,
    ) -> CabinetRead:
        return await read_cabinet(
            self.io,
            lambda drawer: self.io.events(ledger, drawer.cabinet, drawer.ordinal),
            drawers,
            builder,
            fence=ledger.fence,
            is_void=ledger.is_void,
            parallel_drawers=self.options.parallel_drawers,
            page_size=self.options.page_size,
            runs=runs,
        )

    async def _open_drawers(self, cabinet: CabinetKey) -> list[tuple[DrawerState, str]]:
        """The cabinet's drawers with unacknowledged events, in order, with their etags.

        Those whose first unacknowledged event is above the fence too: the catalog is checked
        against all of them (an entry of such a drawer is due, not stale), and the board shows
        only what is below the fence."""
        sql = 'SELECT * FROM c WHERE c.pk = @pk AND IS_NUMBER(c["from"])'
        docs = await self.io.query(self.io.drawers, sql, cabinet.value, {"@pk": cabinet.value})
        return sorted(((drawer_from_doc(d), d["_etag"]) for d in docs), key=lambda pair: pair[0].ordinal)

    async def read_bundle(self, ref: BundleRef) -> tuple[StoredEvent, ...]:
        """The events of a recorded bundle again (a repeated peek returns the same bundle)."""
        sql = (
            f"SELECT {EVENT_FIELDS} FROM c"
            " WHERE c.pk = @pk AND c.seq >= @first AND c.seq <= @last ORDER BY c.seq"
        )
        ledger, _ = await self._read_ledger(ref.cabinet.recipient)
        parts = await asyncio.gather(
            *(
                self.io.query(
                    self.io.events(ledger, ref.cabinet, s.seen.ordinal),
                    sql,
                    s.drawer_id,
                    {"@pk": s.drawer_id, "@first": s.first_seq, "@last": s.last_seq},
                    self.options.page_size,
                )
                for s in ref.slices
            )
        )
        return tuple(
            event_from_doc(doc, s.drawer_id)
            for s, docs in zip(ref.slices, parts, strict=True)
            for doc in docs
            if not ledger.is_void(doc["seq"])
        )

    # ---- Acknowledge ----------------------------------------------------------------------------

    async def acknowledge(
        self,
        ref: BundleRef,
        dequeues: int | None = None,
        deferred: Mapping[str, DeferredAck] | None = None,
    ) -> tuple[DeferredAck, ...]:
        """Advance every touched drawer (seed's table), under If-Match, or defer the write.

        With `deferred` (the actor's acknowledgements not yet written, by drawer), a drawer the
        bundle leaves events in is not written: its new position is returned (the DeferredAcks),
        for the dequeue to record in the actor's stream, and every reader applies it to the stored
        drawer. A drawer whose events the bundle ends is written, with what was deferred for it;
        so is any drawer beyond MAX_DEFERRED_DRAWERS. Without `deferred`, or with `defer_acks`
        off, every drawer is written (what was deferred for it included).

        With `dequeues` (the actor's dequeue count once this dequeue is recorded), the board of the
        peek that formed `ref` is kept for the actor's next peek, with the drawers as acknowledged."""
        mine = {piece.drawer_id for piece in ref.slices}
        room = 0
        if deferred is not None and self.options.defer_acks:
            room = MAX_DEFERRED_DRAWERS - sum(1 for drawer_id in deferred if drawer_id not in mine)
        may_defer: list[bool] = []
        for piece in ref.slices:  # only a slice leaving events in its drawer may be deferred
            allowed = room > 0 and piece.next_seq is not None
            room -= allowed
            may_defer.append(allowed)
        outcomes = await asyncio.gather(
            *(
                self._acknowledge_slice(ref, i, (deferred or {}).get(piece.drawer_id), may_defer[i])
                for i, piece in enumerate(ref.slices)
            )
        )
        later = tuple(d for d, _, _ in outcomes if d is not None)
        recipient = ref.cabinet.recipient
        remembered = self._boards.get(recipient)
        if (
            dequeues is None
            or remembered is None
            or remembered[1] != ref.bundle_id
            or not all(changed for _, changed, _ in outcomes)
        ):
            self._boards.drop(recipient)
            return later
        after = {piece.drawer_id: now for piece, (_, _, now) in zip(ref.slices, outcomes, strict=True)}
        self._boards.put(recipient, remembered[0].dequeued(ref.cabinet, after, dequeues), ref.bundle_id)
        return later

    def forget_board(self, recipient: str) -> None:
        """Drop what the last peek remembered (its dequeue was not recorded as this process's)."""
        self._boards.drop(recipient)

    async def _acknowledge_slice(
        self, ref: BundleRef, index: int, deferred: DeferredAck | None, may_defer: bool
    ) -> tuple[DeferredAck | None, bool, tuple[DrawerState, str] | None]:
        """The drawer's acknowledgement if deferred, whether this call moved the drawer (not when
        acknowledged before), and the drawer as acknowledged with its stored etag (None when it
        was drained and deleted)."""
        piece = ref.slices[index]
        cabinet = ref.cabinet
        # First try the drawer as the peek saw it (one write when nothing changed since), then re-read.
        # `seen` already holds what was deferred for the drawer; its etag is the stored document's.
        known = (piece.seen, piece.etag) if piece.etag else None
        for attempt in range(MAX_CAS_ATTEMPTS):
            await after_conflict(attempt, MAX_CAS_ATTEMPTS)
            if known is None:
                current = await self.io.read(self.io.drawers, piece.drawer_id, cabinet.value)
                if current is None:
                    return None, False, None  # drained and removed by an earlier acknowledge of this bundle
                known = (apply_deferred(drawer_from_doc(current), deferred), current["_etag"])
            drawer, etag = known
            next_now: int | None = None
            if piece.next_seq is None and drawer.last_seq > max(drawer.ack_seq, piece.last_seq):
                next_now = await self._first_after(drawer, max(drawer.ack_seq, piece.last_seq))
            updated = acknowledge_drawer(drawer, piece.last_seq, piece.next_seq, next_now, piece.count)
            if updated == drawer:
                return None, False, None
            if may_defer and piece.next_seq is not None and updated.unacked_from == piece.next_seq:
                later = DeferredAck(drawer.drawer_id, updated.ack_seq, piece.next_seq, updated.acked)
                return later, True, (updated, etag)
            drained = updated.unacked_from is None and updated.used >= self.options.drawer_capacity
            crash_point("hub.ack.drawer")
            if drained:
                ok = await self.io.delete_if_match(self.io.drawers, drawer.drawer_id, cabinet.value, etag)
                new_etag = "" if ok else None
            else:
                new_etag = await self.io.replace_tagged(self.io.drawers, drawer_doc(updated), etag)
            if new_etag is not None:
                break
            known = None
        else:
            raise ServiceUnavailable(f"drawer {piece.drawer_id} kept changing; dequeue not finished")
        # The catalog is left as it is: the drawer's entry stays at or below its first unacknowledged
        # event (or points at a drawer with nothing left), which a peek reading the catalog checks
        # and corrects (_check). A Save adds the entry of a drawer that had nothing unacknowledged.
        return None, True, (None if drained else (updated, new_etag))

    async def _first_after(self, drawer: DrawerState, seq: int) -> int | None:
        """The first live (not voided) sequence number above `seq` in the drawer, page by page: a
        crashed save can leave a run of voided events of any length."""
        ledger, _ = await self._read_ledger(drawer.cabinet.recipient)
        sql = f"SELECT TOP {FIRST_AFTER_PAGE} c.seq FROM c WHERE c.pk = @pk AND c.seq > @after ORDER BY c.seq"
        after = seq
        while True:
            docs = await self.io.query(
                self.io.events(ledger, drawer.cabinet, drawer.ordinal),
                sql,
                drawer.drawer_id,
                {"@pk": drawer.drawer_id, "@after": after},
            )
            live = next((d["seq"] for d in docs if not ledger.is_void(d["seq"])), None)
            if live is not None or len(docs) < FIRST_AFTER_PAGE:
                return live
            after = docs[-1]["seq"]

    # ---- Depth ----------------------------------------------------------------------------------

    async def depth(
        self, recipient: str, deferred: Mapping[str, DeferredAck] | None = None
    ) -> dict[str, int]:
        """Visible, unacknowledged events per domain: what the actor can still peek.

        Reads the event sequence numbers above each drawer's position (one query per open drawer;
        `deferred`: the actor's acknowledgements not yet written to them) and leaves out voided
        ones (crashed or abandoned saves) and any above the fence.
        """
        waiting = deferred or {}
        ledger = await self._read_ledger_reaped(recipient)
        cabinets = [CabinetKey(*value.split("|", 2)) for value in ledger.heads]
        drawer_sql = "SELECT * FROM c WHERE c.pk = @pk"
        drawers = await asyncio.gather(
            *(self.io.query(self.io.drawers, drawer_sql, c.value, {"@pk": c.value}) for c in cabinets)
        )
        seq_sql = "SELECT VALUE c.seq FROM c WHERE c.pk = @pk AND c.seq > @after"

        async def visible(doc: dict[str, Any]) -> int:
            drawer = drawer_from_doc(doc)
            drawer = apply_deferred(drawer, waiting.get(drawer.drawer_id))
            if drawer.used <= drawer.acked:
                return 0
            params = {"@pk": drawer.drawer_id, "@after": drawer.ack_seq}
            events = self.io.events(ledger, drawer.cabinet, drawer.ordinal)
            seqs: list[Any] = await self.io.query(events, seq_sql, drawer.drawer_id, params)  # VALUE: ints
            return sum(1 for seq in map(int, seqs) if seq <= ledger.fence and not ledger.is_void(seq))

        counts: dict[str, int] = {}
        for cabinet, docs in zip(cabinets, drawers, strict=True):
            found = await asyncio.gather(*(visible(d) for d in docs))
            counts[cabinet.domain] = counts.get(cabinet.domain, 0) + sum(found)
        return {domain: n for domain, n in counts.items() if n}
