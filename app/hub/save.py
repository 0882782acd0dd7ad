"""Save (MessageHub): claim sequence numbers in the recipient's ledger, write the idempotency index,
the events, their drawers and catalog entries, then release the claim so the fence passes them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from app.crashpoints import crash_point
from app.dataavailable import DataAvailable
from app.errors import ServiceUnavailable
from app.hub.documents import catalog_doc, drawer_doc, drawer_from_doc, event_doc, index_doc
from app.hub.errors import SaveLeaseLost
from app.hub.known import KnownDocs, Recent
from app.hub.ledgers import MAX_CAS_ATTEMPTS, Ledgers
from app.hub.model import (
    Allocation,
    CatalogEntry,
    DrawerState,
    Ledger,
    Placement,
    abandon,
    allocate,
    content_hash,
    release,
    renew,
    save_into_drawer,
)
from app.hub.parts import RepositoryOptions, RepositoryPart
from app.hub.ports import HubStore
from app.hub.saving import IndexEntry, SavePlan, plan_save
from app.hub.views import CabinetBoard
from app.waiting import after_conflict, gather_all

__all__ = ["HubSave", "SaveResult"]

log = logging.getLogger(__name__)

MAX_SAVE_PASSES = 5  # plans of one save that may meet index entries they did not know of
LOOKUP_CONCURRENCY = 64  # index point reads in flight per save

C = TypeVar("C")  # the store's container handle


@dataclass(frozen=True, slots=True)
class SaveResult:
    saved: int
    duplicates: int


def entry_owed_by_another(ledger: Ledger, unacked_from: int, token: str) -> int | None:
    """The catalog entry a save must create for a drawer whose first unacknowledged event another
    save placed, when that save may never create it: it is void (died before its entry), or still
    held by a claim whose save may yet fail and never be retried. Without the entry no Peek reaches
    the drawer, nor the events this save put in it. A save that released its claim had created
    the entry first. Creating an entry that exists is a no-op."""
    if ledger.is_void(unacked_from):
        return unacked_from
    claim = ledger.claim_of(unacked_from)
    return unacked_from if claim is not None and claim.token != token else None


class HubSave(RepositoryPart[C]):
    def __init__(
        self,
        io: HubStore[C],
        options: RepositoryOptions,
        ledgers: Ledgers[C],
        boards: KnownDocs[CabinetBoard],
    ) -> None:
        super().__init__(io, options, ledgers, boards)
        # The drawers this process last wrote: the next save into one starts its compare-and-swap
        # from it instead of a read.
        self._drawers: KnownDocs[DrawerState] = Recent()
        self._saving = asyncio.Semaphore(options.save_recipients)

    async def save(self, events: Sequence[DataAvailable]) -> SaveResult:
        """Save events (in order); recipients in parallel, each recipient's order kept."""
        by_recipient: dict[str, list[DataAvailable]] = {}
        for event in events:
            by_recipient.setdefault(event.recipient, []).append(event)
        results = await gather_all(*(self._save_in_turn(r, evs) for r, evs in by_recipient.items()))
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
        a redelivery found by the creates would give its claim back as a void range, which the
        ledger keeps until the reclaim sweep deletes what the claim wrote.
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
                    await gather_all(
                        *(
                            self._write_placement(
                                self.io.events(ledger, p.cabinet, p.ordinal), p, ledger, allocation.token
                            )
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
            ledger, etag = await self.ledgers.read(recipient, known=attempt == 0 and not index)
            ledger = ledger.reap(self.ledgers.now())
            plan = plan_save(events, index, ledger)
            if not plan.to_place:
                return SaveResult(0, plan.duplicates)
            updated, allocation = allocate(
                ledger,
                plan.to_place,
                token=uuid.uuid4().hex,
                capacity=self.options.drawer_capacity,
                now_s=self.ledgers.now(),
                lease_s=self.options.lease_s,
                new_drawer_id=lambda: str(uuid.uuid4()),
            )
            crash_point("hub.save.claim")
            if await self.ledgers.write(updated, etag):
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
            doc = index_doc(
                event.id,
                recipient,
                content_hash(event),
                seqs[event.id],
                allocation.token,
                self.options.dedup_window_s,
            )
            entry = known.get(event.id)
            if entry is None:
                fresh.append(doc)
            else:
                takeovers.append((doc, entry.etag))
        crash_point("hub.save.index")
        results = await gather_all(
            self.io.create_all_new(self.io.ids, recipient, fresh),
            *(self.io.replace_if_match(self.io.ids, doc, etag) for doc, etag in takeovers),
        )
        return all(results)

    async def _write_placement(
        self, events_container: C, placement: Placement, ledger: Ledger, token: str
    ) -> None:
        """Events first, then the drawer (so a drawer never promises events that are not written),
        then the catalog entry a Peek finds the drawer by."""
        docs = [event_doc(s) for s in placement.events]
        crash_point("hub.save.events")
        await self.io.bulk_create(events_container, placement.drawer_id, docs)
        drawer, catalog_seq = await self._record_in_drawer(placement)
        if catalog_seq is None and drawer.unacked_from is not None:
            catalog_seq = entry_owed_by_another(ledger, drawer.unacked_from, token)
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
                    kept = await self.ledgers.update_claim(
                        recipient, token, partial(renew, until_s=self.ledgers.now() + lease_s)
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
        if not await self.ledgers.update_claim(recipient, token, release):
            raise SaveLeaseLost(f"save for {recipient} outlived its lease of {self.options.lease_s}s")

    async def _abandon(self, recipient: str, token: str) -> None:
        # A claim already voided needs nothing.
        await self.ledgers.update_claim(recipient, token, partial(abandon, now_s=self.ledgers.now()))
