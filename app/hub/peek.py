"""GetNextUnacknowledged (MessageHub): the next bundle from the cabinet holding the recipient's oldest
visible event, found through the catalog, with the catalog corrected where a peek finds it stale."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from app.crashpoints import crash_point
from app.hub.bundling import BundleBuilder, BundleRef
from app.hub.documents import EVENT_FIELDS, catalog_doc, catalog_from_doc, drawer_from_doc, event_from_doc
from app.hub.model import (
    CabinetKey,
    DeferredAck,
    DrawerState,
    Ledger,
    StoredEvent,
    apply_deferred,
    catalog_partition,
    reconcile_catalog,
)
from app.hub.parts import RepositoryPart
from app.hub.reader import CabinetRead, read_cabinet
from app.hub.views import CabinetBoard
from app.waiting import gather_all

__all__ = ["Candidate", "HubPeek"]

C = TypeVar("C")  # the store's container handle


@dataclass(frozen=True, slots=True)
class Candidate:
    """A bundle formed by GetNextUnacknowledged, not yet recorded in the actor's stream."""

    ref: BundleRef
    events: tuple[StoredEvent, ...]


class HubPeek(RepositoryPart[C]):
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
        remembered = self.boards.get(recipient)
        self.boards.drop(recipient)
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
            ledger, current = await self.ledgers.read_reaped(recipient), True
        fence = ledger.fence
        fresh = board is None
        if board is None:
            board = await self._read_catalog(recipient, domains, ledger)
        while True:
            cabinet = board.next_cabinet(fence)
            if cabinet is None:
                if not current:
                    ledger, current = await self.ledgers.read_reaped(recipient), True
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
                ledger, current = await self.ledgers.read_reaped(recipient), True
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
            self.boards.put(recipient, board.peeked(bundle_id, cabinet, read.rest), bundle_id)
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
            await gather_all(*(self.io.create(self.io.catalog, catalog_doc(e)) for e in missing))
        if stale:
            crash_point("hub.peek.catalog_removed")
            await gather_all(
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
        ledger, _ = await self.ledgers.read(ref.cabinet.recipient)
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
