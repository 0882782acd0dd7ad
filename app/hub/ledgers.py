"""The recipients' ledgers (MessageHub's sequence numbers, claims and fence) under compare-and-swap,
with the version this process last read or wrote of each, and the clock their leases are read by."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

from app.errors import ServiceUnavailable
from app.hub.documents import ledger_doc, ledger_from_doc
from app.hub.known import KnownDocs, Recent
from app.hub.model import Ledger
from app.hub.ports import HubStore
from app.waiting import after_conflict

__all__ = ["MAX_CAS_ATTEMPTS", "Ledgers"]

MAX_CAS_ATTEMPTS = 50  # compare-and-swap attempts on one document before a write gives up

C = TypeVar("C")  # the store's container handle


class Ledgers(Generic[C]):
    def __init__(self, io: HubStore[C]) -> None:
        self.io = io
        # The worker that owns a recipient starts each compare-and-swap from this instead of a read.
        self._known: KnownDocs[Ledger] = Recent()

    def now(self) -> float:
        """The time claims' leases are given and reaped by (one place, so tests can move it)."""
        return time.time()

    async def update_claim(
        self, recipient: str, token: str, change: Callable[[Ledger, str], Ledger | None]
    ) -> bool:
        """Apply `change` to the ledger under If-Match; False when the claim is no longer there.

        Starts from the ledger this process knows; a claim missing there is checked on a fresh read."""
        for attempt in range(MAX_CAS_ATTEMPTS):
            await after_conflict(attempt, MAX_CAS_ATTEMPTS)
            ledger, etag = await self.read(recipient, known=attempt == 0)
            changed = change(ledger, token)
            if changed is None:
                if attempt == 0:
                    continue  # the known ledger may be older than the claim: read it afresh
                return False
            if await self.write(changed, etag):
                return True
        raise ServiceUnavailable(f"ledger of {recipient} kept changing; fence not advanced")

    async def update(self, recipient: str, change: Callable[[Ledger], Ledger]) -> None:
        """Apply `change` to the stored ledger under If-Match (re-read and redone on a conflict);
        nothing is written when it changes nothing."""
        for attempt in range(MAX_CAS_ATTEMPTS):
            await after_conflict(attempt, MAX_CAS_ATTEMPTS)
            ledger, etag = await self.read(recipient, known=attempt == 0)
            changed = change(ledger)
            if changed == ledger or await self.write(changed, etag):
                return
        raise ServiceUnavailable(f"ledger of {recipient} kept changing; not updated")

    async def read_reaped(self, recipient: str) -> Ledger:
        """The ledger with the claims of crashed saves voided and written back, so a reader's fence
        moves past them even when no save for this recipient comes again (the write makes a slow
        writer's late release fail, so events a reader treated as void never reappear)."""
        for attempt in range(MAX_CAS_ATTEMPTS):
            await after_conflict(attempt, MAX_CAS_ATTEMPTS)
            ledger, etag = await self.read(recipient)
            reaped = ledger.reap(self.now())
            if reaped == ledger or etag is None or await self.write(reaped, etag):
                return reaped
        raise ServiceUnavailable(f"ledger of {recipient} kept changing; read not started")

    async def read(self, recipient: str, *, known: bool = False) -> tuple[Ledger, str | None]:
        """The recipient's ledger and etag: read (and remembered), or with `known` the version this
        process last read or wrote when it has one (only as the start of a compare-and-swap)."""
        if known and (remembered := self._known.get(recipient)) is not None:
            return remembered
        doc = await self.io.read(self.io.ledgers, recipient, recipient)
        if doc is None:
            self._known.drop(recipient)
            return self.io.new_ledger(recipient), None
        ledger = ledger_from_doc(doc)
        self._known.put(recipient, ledger, doc["_etag"])
        return ledger, doc["_etag"]

    async def write(self, ledger: Ledger, etag: str | None) -> bool:
        if etag is None:
            written = await self.io.create_tagged(self.io.ledgers, ledger_doc(ledger))
        else:
            written = await self.io.replace_tagged(self.io.ledgers, ledger_doc(ledger), etag)
        if written is None:
            self._known.drop(ledger.recipient)
            return False
        self._known.put(ledger.recipient, ledger, written)
        return True
