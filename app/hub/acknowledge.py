"""Acknowledge (MessageHub's dequeue): advance every drawer a bundle touched under If-Match, or defer
the write to the actor's stream while the bundle leaves events in the drawer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from app.crashpoints import crash_point
from app.errors import ServiceUnavailable
from app.hub.bundling import BundleRef
from app.hub.documents import drawer_doc, drawer_from_doc
from app.hub.ledgers import MAX_CAS_ATTEMPTS
from app.hub.model import DeferredAck, DrawerState, acknowledge_drawer, apply_deferred
from app.hub.parts import RepositoryPart
from app.waiting import after_conflict, gather_all

__all__ = ["MAX_DEFERRED_DRAWERS", "HubAcknowledge"]

FIRST_AFTER_PAGE = 20
# Drawers of one actor whose acknowledgement may wait in its stream; beyond, a dequeue writes.
MAX_DEFERRED_DRAWERS = 16

C = TypeVar("C")  # the store's container handle


class HubAcknowledge(RepositoryPart[C]):
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
        outcomes = await gather_all(
            *(
                self._acknowledge_slice(ref, i, (deferred or {}).get(piece.drawer_id), may_defer[i])
                for i, piece in enumerate(ref.slices)
            )
        )
        later = tuple(d for d, _, _ in outcomes if d is not None)
        recipient = ref.cabinet.recipient
        remembered = self.boards.get(recipient)
        if (
            dequeues is None
            or remembered is None
            or remembered[1] != ref.bundle_id
            or not all(changed for _, changed, _ in outcomes)
        ):
            self.boards.drop(recipient)
            return later
        after = {piece.drawer_id: now for piece, (_, _, now) in zip(ref.slices, outcomes, strict=True)}
        self.boards.put(recipient, remembered[0].dequeued(ref.cabinet, after, dequeues), ref.bundle_id)
        return later

    async def _acknowledge_slice(
        self, ref: BundleRef, index: int, deferred: DeferredAck | None, may_defer: bool
    ) -> tuple[DeferredAck | None, bool, tuple[DrawerState, str] | None]:
        """The drawer's acknowledgement if deferred, whether this call moved the drawer (not when
        acknowledged before), and the drawer as acknowledged with its stored etag (None when it
        was drained and reclaimed)."""
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
                    return None, False, None  # drained and reclaimed since
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
            # A drained drawer is written too, not deleted: it is the mark by which the reclaim
            # sweep (reclaim.py) finds its events; deleting it here would orphan them.
            crash_point("hub.ack.drawer")
            new_etag = await self.io.replace_tagged(self.io.drawers, drawer_doc(updated), etag)
            if new_etag is not None:
                break
            known = None
        else:
            raise ServiceUnavailable(f"drawer {piece.drawer_id} kept changing; dequeue not finished")
        # The catalog is left as it is: the drawer's entry stays at or below its first unacknowledged
        # event (or points at a drawer with nothing left), which a peek reading the catalog checks
        # and corrects (_check). A Save adds the entry of a drawer that had nothing unacknowledged.
        return None, True, (updated, new_etag)

    async def _first_after(self, drawer: DrawerState, seq: int) -> int | None:
        """The first live (not voided) sequence number above `seq` in the drawer, page by page: a
        crashed save can leave a run of voided events of any length."""
        ledger, _ = await self.ledgers.read(drawer.cabinet.recipient)
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
