"""The DataAvailable repository of MessageHub on Cosmos DB: Save, GetNextUnacknowledged, Acknowledge.

Each operation lives in its own module (save.py, peek.py, acknowledge.py) over the recipients'
ledgers (ledgers.py); this class puts them together on one store and adds Depth."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from app.dataavailable import DataAvailable
from app.hub.acknowledge import HubAcknowledge
from app.hub.bundling import BundleBuilder, BundleRef
from app.hub.documents import drawer_from_doc
from app.hub.known import KnownDocs, Recent
from app.hub.ledgers import Ledgers
from app.hub.model import CabinetKey, DeferredAck, StoredEvent, apply_deferred
from app.hub.parts import RepositoryOptions
from app.hub.peek import Candidate, HubPeek
from app.hub.ports import HubStore
from app.hub.reclaim import HubReclaim, ReclaimReport
from app.hub.save import HubSave, SaveResult
from app.hub.views import CabinetBoard

__all__ = ["Candidate", "HubRepository", "RepositoryOptions", "SaveResult"]

C = TypeVar("C")  # the store's container handle


class HubRepository(Generic[C]):
    """Save, GetNextUnacknowledged and Acknowledge on any HubStore (Cosmos DB, or in memory)."""

    def __init__(self, io: HubStore[C], options: RepositoryOptions) -> None:
        self.io = io
        self.options = options
        self.ledgers: Ledgers[C] = Ledgers(io)
        self.boards: KnownDocs[CabinetBoard] = Recent()
        parts = (io, options, self.ledgers, self.boards)
        self.saves = HubSave(*parts)
        self.peeks = HubPeek(*parts)
        self.acks = HubAcknowledge(*parts)
        self.reclaims = HubReclaim(*parts)

    async def save(self, events: Sequence[DataAvailable]) -> SaveResult:
        """Save events (in order); recipients in parallel, each recipient's order kept."""
        return await self.saves.save(events)

    async def next_unacknowledged(
        self,
        recipient: str,
        domains: Sequence[str],
        bundle_id: str,
        builder: BundleBuilder,
        dequeues: int | None = None,
        deferred: Mapping[str, DeferredAck] | None = None,
    ) -> Candidate | None:
        """The next bundle (HubPeek.next_unacknowledged)."""
        return await self.peeks.next_unacknowledged(
            recipient, domains, bundle_id, builder, dequeues, deferred
        )

    async def read_bundle(self, ref: BundleRef) -> tuple[StoredEvent, ...]:
        """The events of a recorded bundle again (a repeated peek returns the same bundle)."""
        return await self.peeks.read_bundle(ref)

    async def acknowledge(
        self,
        ref: BundleRef,
        dequeues: int | None = None,
        deferred: Mapping[str, DeferredAck] | None = None,
    ) -> tuple[DeferredAck, ...]:
        """Advance or defer every drawer the bundle touched (HubAcknowledge.acknowledge)."""
        return await self.acks.acknowledge(ref, dequeues, deferred)

    def forget_board(self, recipient: str) -> None:
        """Drop what the last peek remembered (its dequeue was not recorded as this process's)."""
        self.boards.drop(recipient)

    async def reclaim(self, *, dry_run: bool = False) -> ReclaimReport:
        """Delete the documents of drained drawers (HubReclaim.sweep)."""
        return await self.reclaims.sweep(dry_run=dry_run)

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
        ledger = await self.ledgers.read_reaped(recipient)
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
