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
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from app.crashpoints import crash_point
from app.hub.documents import drawer_from_doc
from app.hub.model import DrawerHead, DrawerState, Ledger
from app.hub.parts import RepositoryPart
from app.waiting import gather_all

__all__ = ["ReclaimReport", "drained"]

C = TypeVar("C")  # the store's container handle

DELETES_IN_FLIGHT = 32  # single deletes of one drawer's events at once


def drained(drawer: DrawerState, head: DrawerHead | None) -> bool:
    """Whether the drawer will never hold an unacknowledged event again: none is left, and it is not
    its cabinet's last drawer (the only one a save fills)."""
    return drawer.unacked_from is None and head is not None and drawer.ordinal < head.ordinal


@dataclass(frozen=True, slots=True)
class ReclaimReport:
    """What a sweep reclaimed (or, in a dry run, would reclaim)."""

    recipients: int = 0  # ledgers looked at
    drawers: int = 0  # drained drawers found (their documents all reclaimed)
    documents: int = 0  # acknowledged events, and the drained drawers' documents
    bytes: int = 0  # the documents' JSON size, as stored without system fields
    requests: int = 0  # store requests the sweep made (reads included)
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "recipients": self.recipients,
            "drawers": self.drawers,
            "documents": self.documents,
            "bytes": self.bytes,
            "requests": self.requests,
            "dryRun": self.dry_run,
        }


class HubReclaim(RepositoryPart[C]):
    async def sweep(self, *, dry_run: bool = False) -> ReclaimReport:
        """Reclaim every acknowledged event and drained drawer (report only, with `dry_run`)."""
        before = self.io.counter.total
        recipients = list(dict.fromkeys([k async for k in self.io.partition_keys(self.io.ledgers)]))
        drawers = documents = size = 0
        for recipient in recipients:
            ledger = await self.ledgers.read_reaped(recipient)
            for value, head in ledger.heads.items():
                sql = "SELECT * FROM c WHERE c.pk = @pk"
                for doc in await self.io.query(self.io.drawers, sql, value, {"@pk": value}):
                    whole = drained(drawer_from_doc(doc), head)
                    reclaimed, reclaimed_bytes = await self._reclaim(ledger, doc, whole, dry_run=dry_run)
                    drawers += whole
                    documents += reclaimed
                    size += reclaimed_bytes
        return ReclaimReport(
            len(recipients), drawers, documents, size, self.io.counter.total - before, dry_run
        )

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
        gate = asyncio.Semaphore(DELETES_IN_FLIGHT)

        async def delete(event_id: str) -> None:
            async with gate:
                await self.io.delete(container, event_id, drawer.drawer_id)

        crash_point("hub.reclaim.events")  # the drawer's position (or its document) marks the rest
        await gather_all(*(delete(str(e["id"])) for e in events))
        if whole:
            crash_point("hub.reclaim.drawer")
            await self.io.delete(self.io.drawers, drawer.drawer_id, drawer.cabinet.value)
        return len(gone), size


def _size(doc: dict[str, Any]) -> int:
    return len(orjson.dumps({k: v for k, v in doc.items() if not k.startswith("_")}))
