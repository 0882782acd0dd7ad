"""Reclaim (MessageHub's data lifecycle): the events actors acknowledged, and drained drawers.

A Peek reads a drawer's events above its stored position (`ack_seq`) only, so every event at or
below it is acknowledged and never read again: the sweep deletes those. A drawer that is no longer
its cabinet's last one (no save places events in it again) and has no unacknowledged event is
drained: the sweep deletes its remaining documents (events of voided claims), then the drawer
document itself, which until then is the durable mark of the work left. The sweep finds drawers
through each recipient's ledger (its cabinets); a sweep cut anywhere is finished by the next one.
The idempotency index is kept: a redelivered event stays a duplicate.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import orjson

from app.crashpoints import crash_point
from app.hub.documents import drawer_from_doc, ledger_from_doc
from app.hub.model import CabinetKey, DrawerHead, DrawerState, Ledger
from app.hub.parts import RepositoryPart
from app.hub.voids import is_void, remove_voids
from app.waiting import gather_all

__all__ = ["ReclaimReport", "drained"]

C = TypeVar("C")  # the store's container handle

DELETES_IN_FLIGHT = 32
# How long a voided range is kept when the index is kept for ever (no dedup window): a save paused
# past its lease may still write its events into it, and only the range hides them.
VOID_HORIZON_S = 86_400  # single deletes of one drawer's events at once


def drained(drawer: DrawerState, head: DrawerHead | None, *, live_left: bool) -> bool:
    """Whether the drawer will never show an event again: no live (not voided) event is left above
    its position, and it is not its cabinet's last drawer (the only one a new claim fills; the
    caller makes sure no claim is pending, which could still write an older one)."""
    return not live_left and head is not None and drawer.ordinal < head.ordinal


@dataclass(frozen=True, slots=True)
class ReclaimReport:
    """What a sweep reclaimed (or, in a dry run, would reclaim)."""

    recipients: int = 0  # ledgers looked at
    drawers: int = 0  # drained drawers found (their documents all reclaimed)
    documents: int = 0  # acknowledged events, drained drawers, and documents of voided claims
    bytes: int = 0  # the documents' JSON size, as stored without system fields
    voids: int = 0  # voided ranges dropped from ledgers once their documents were gone
    requests: int = 0  # store requests the sweep made (reads included)
    dry_run: bool = False

    def __add__(self, other: ReclaimReport) -> ReclaimReport:
        return ReclaimReport(
            self.recipients + other.recipients,
            self.drawers + other.drawers,
            self.documents + other.documents,
            self.bytes + other.bytes,
            self.voids + other.voids,
            self.requests + other.requests,
            self.dry_run or other.dry_run,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "recipients": self.recipients,
            "drawers": self.drawers,
            "documents": self.documents,
            "bytes": self.bytes,
            "voids": self.voids,
            "requests": self.requests,
            "dryRun": self.dry_run,
        }


class HubReclaim(RepositoryPart[C]):
    async def sweep(self, *, dry_run: bool = False) -> ReclaimReport:
        """Reclaim every acknowledged event, drained drawer and voided claim (report only, with
        `dry_run`)."""
        before = self.io.counter.total
        # The read feed's ledgers serve as they are; only one holding an expired claim is read
        # again to void it (written back), so a sweep reads each ledger once.
        ledgers = [ledger_from_doc(doc) async for doc in self.io.read_all(self.io.ledgers)]
        report = ReclaimReport(dry_run=dry_run)
        for ledger in ledgers:
            report += await self._sweep_recipient(ledger, dry_run=dry_run)
        return replace(report, requests=self.io.counter.total - before)

    async def _sweep_recipient(self, listed: Ledger, *, dry_run: bool) -> ReclaimReport:
        recipient = listed.recipient
        now = self.ledgers.now()
        ledger = listed if listed.reap(now) == listed else await self.ledgers.read_reaped(recipient)
        # No save holds a claim: none can still write a drawer that is not its cabinet's last.
        quiet = not ledger.claims
        report = ReclaimReport(recipients=1)
        kept: dict[str, tuple[CabinetKey, int]] = {}  # drawers left in place: id -> cabinet, ordinal
        for value, head in ledger.heads.items():
            cabinet = CabinetKey(*value.split("|", 2))
            kept[head.drawer_id] = (cabinet, head.ordinal)  # its document may not be written yet
            sql = "SELECT * FROM c WHERE c.pk = @pk"
            for doc in await self.io.query(self.io.drawers, sql, value, {"@pk": value}):
                drawer = drawer_from_doc(doc)
                whole = quiet and drained(drawer, head, live_left=await self._live_left(ledger, drawer))
                documents, size = await self._reclaim(ledger, doc, whole, dry_run=dry_run)
                report += ReclaimReport(drawers=int(whole), documents=documents, bytes=size)
                if not whole:
                    kept[drawer.drawer_id] = (cabinet, drawer.ordinal)
        if ledger.voids:
            report += await self._drop_voids(ledger, kept, dry_run=dry_run)
        if self.options.expire_index_by_sweep_for_embedded_cosmos and self.options.dedup_window_s:
            report += await self._expire_index(recipient, dry_run=dry_run)
        return report

    async def _live_left(self, ledger: Ledger, drawer: DrawerState) -> bool:
        """Whether a live event is left above the drawer's position; only a drawer whose first
        unacknowledged event is void (a dead save's) is looked into."""
        if drawer.unacked_from is None:
            return False
        if not ledger.is_void(drawer.unacked_from):
            return True
        sql = "SELECT VALUE c.seq FROM c WHERE c.pk = @pk AND c.seq > @ack"
        container = self.io.events(ledger, drawer.cabinet, drawer.ordinal)
        params = {"@pk": drawer.drawer_id, "@ack": drawer.ack_seq}
        seqs: list[Any] = await self.io.query(container, sql, drawer.drawer_id, params)
        return not all(ledger.is_void(int(seq)) for seq in seqs)

    async def _reclaim(
        self, ledger: Ledger, doc: dict[str, Any], whole: bool, *, dry_run: bool
    ) -> tuple[int, int]:
        """Delete a drawer's acknowledged events, and with `whole` every event and then the drawer
        document: (documents, bytes)."""
        drawer = drawer_from_doc(doc)
        container = self.io.events(ledger, drawer.cabinet, drawer.ordinal)
        params: dict[str, Any]
        if whole:
            sql, params = "SELECT * FROM c WHERE c.pk = @pk", {"@pk": drawer.drawer_id}
        else:
            sql = "SELECT * FROM c WHERE c.pk = @pk AND c.seq <= @ack"
            params = {"@pk": drawer.drawer_id, "@ack": drawer.ack_seq}
        events = await self.io.query(container, sql, drawer.drawer_id, params)
        gone = [*events, doc] if whole else events
        size = sum(_size(d) for d in gone)
        if dry_run or not gone:
            return len(gone), size
        crash_point("hub.reclaim.events")  # the drawer's position (or its document) marks the rest
        await self._delete_each([(container, drawer.drawer_id, e) for e in events])
        if whole:
            crash_point("hub.reclaim.drawer")
            await self.io.delete(self.io.drawers, drawer.drawer_id, drawer.cabinet.value)
        return len(gone), size

    async def _drop_voids(
        self, ledger: Ledger, drawers: dict[str, tuple[CabinetKey, int]], *, dry_run: bool
    ) -> ReclaimReport:
        """Delete the documents of claims voided longer than the dedup window ago (their events in
        the drawers left, their index entries), then drop those ranges from the ledger: until then
        the ranges hide what is left. An index entry taken over by a retry has a live sequence
        number and stays. A younger range is kept: a save paused past its lease may still be
        writing into it (its release fails, and its caller saves the events again)."""
        horizon = self.options.dedup_window_s or VOID_HORIZON_S
        voids = tuple(v for v in ledger.voids if v[2] + horizon <= self.ledgers.now())
        if not voids:
            return ReclaimReport()
        params = {"@lo": voids[0][0], "@hi": voids[-1][1]}
        sql = "SELECT * FROM c WHERE c.pk = @pk AND c.seq >= @lo AND c.seq <= @hi"
        doomed: list[tuple[C, str, dict[str, Any]]] = []
        for drawer_id, (cabinet, ordinal) in drawers.items():
            container = self.io.events(ledger, cabinet, ordinal)
            found = await self.io.query(container, sql, drawer_id, {**params, "@pk": drawer_id})
            doomed += [(container, drawer_id, d) for d in found if is_void(voids, d["seq"])]
        recipient = ledger.recipient
        found = await self.io.query(self.io.ids, sql, recipient, {**params, "@pk": recipient})
        doomed += [(self.io.ids, recipient, d) for d in found if is_void(voids, d["seq"])]
        report = ReclaimReport(
            documents=len(doomed), bytes=sum(_size(d) for _, _, d in doomed), voids=len(voids)
        )
        if dry_run:
            return report
        crash_point("hub.reclaim.void_documents")  # the ranges still hide what is left of them
        await self._delete_each(doomed)
        crash_point("hub.reclaim.voids")
        await self.ledgers.update(
            recipient, lambda current: replace(current, voids=remove_voids(current.voids, voids))
        )
        return report

    async def _expire_index(self, recipient: str, *, dry_run: bool) -> ReclaimReport:
        """Delete the recipient's index entries last written longer than the dedup window ago: what
        a container's per-item TTL does on Cosmos DB, which the embedded endpoint does not do."""
        sql = "SELECT * FROM c WHERE c.pk = @pk AND c._ts < @cut"
        cut = int(self.ledgers.now()) - self.options.dedup_window_s
        found = await self.io.query(self.io.ids, sql, recipient, {"@pk": recipient, "@cut": cut})
        report = ReclaimReport(documents=len(found), bytes=sum(_size(d) for d in found))
        if dry_run or not found:
            return report
        crash_point("hub.reclaim.index")  # expired entries left count as known a little longer
        await self._delete_each([(self.io.ids, recipient, d) for d in found])
        return report

    async def _delete_each(self, docs: list[tuple[C, str, dict[str, Any]]]) -> None:
        """Delete documents given as (container, partition key, document), DELETES_IN_FLIGHT at once:
        one request each (the embedded endpoint has no batch delete); one already gone is no error."""
        gate = asyncio.Semaphore(DELETES_IN_FLIGHT)

        async def delete(container: C, partition_key: str, doc_id: str) -> None:
            async with gate:
                await self.io.delete(container, doc_id, partition_key)

        await gather_all(*(delete(c, pk, str(d["id"])) for c, pk, d in docs))


def _size(doc: dict[str, Any]) -> int:
    return len(orjson.dumps({k: v for k, v in doc.items() if not k.startswith("_")}))
