"""The hub's documents as stored (JSON bodies), and back: events, index entries, drawers, catalog
entries, ledgers. Pure; the store adapters (app/hub/cosmos_io.py, app/hub/memory.py) keep them as given."""

from __future__ import annotations

from typing import Any

from app.dataavailable import DataAvailable
from app.hub.model import CabinetKey, CatalogEntry, Claim, DrawerHead, DrawerState, Ledger, StoredEvent
from app.hub.voids import void_ranges

__all__ = [
    "EVENT_FIELDS",
    "catalog_doc",
    "catalog_from_doc",
    "drawer_doc",
    "drawer_from_doc",
    "event_doc",
    "event_from_doc",
    "index_doc",
    "ledger_doc",
    "ledger_from_doc",
]

EVENT_FIELDS = "c.seq, c.eid, c.r, c.o, c.mt, c.w, c.b, c.bi"  # an event document's fields, as queried


def event_doc(stored: StoredEvent) -> dict[str, Any]:
    event = stored.event
    return {
        "id": f"{stored.seq:016d}",
        "pk": stored.drawer_id,
        "seq": stored.seq,
        "eid": event.id,
        "r": event.recipient,
        "o": event.origin,
        "mt": event.message_type,
        "w": event.weight,
        "b": event.bundleable,
        "bi": event.batch_item_id,
    }


def index_doc(
    event_id: str, recipient: str, digest: str, seq: int, token: str, ttl_s: int = 0
) -> dict[str, Any]:
    """The idempotency index entry of one saved event (id = event id, partition = recipient);
    with `ttl_s`, Cosmos DB deletes it that long after its last write."""
    doc: dict[str, Any] = {"id": event_id, "pk": recipient, "h": digest, "seq": seq, "tok": token}
    if ttl_s:
        doc["ttl"] = ttl_s
    return doc


def event_from_doc(doc: dict[str, Any], drawer_id: str) -> StoredEvent:
    event = DataAvailable(doc["eid"], doc["r"], doc["o"], doc["mt"], doc["w"], doc["b"], doc.get("bi"))
    return StoredEvent(event, doc["seq"], drawer_id)


def drawer_doc(drawer: DrawerState) -> dict[str, Any]:
    return {
        "id": drawer.drawer_id,
        "pk": drawer.cabinet.value,
        "r": drawer.cabinet.recipient,
        "d": drawer.cabinet.domain,
        "mt": drawer.cabinet.message_type,
        "ord": drawer.ordinal,
        "last": drawer.last_seq,
        "ack": drawer.ack_seq,
        "from": drawer.unacked_from,
        "used": drawer.used,
        "acked": drawer.acked,
    }


def drawer_from_doc(doc: dict[str, Any]) -> DrawerState:
    cabinet = CabinetKey(doc["r"], doc["d"], doc["mt"])
    return DrawerState(
        doc["id"],
        cabinet,
        doc["ord"],
        doc["last"],
        doc["ack"],
        doc.get("from"),
        doc["used"],
        doc.get("acked", 0),
    )


def catalog_doc(entry: CatalogEntry) -> dict[str, Any]:
    return {
        "id": entry.entry_id,
        "pk": entry.cabinet.catalog_partition,
        "seq": entry.seq,
        "drawer": entry.drawer_id,
        "r": entry.cabinet.recipient,
        "d": entry.cabinet.domain,
        "mt": entry.cabinet.message_type,
    }


def catalog_from_doc(doc: dict[str, Any]) -> CatalogEntry:
    return CatalogEntry(CabinetKey(doc["r"], doc["d"], doc["mt"]), doc["drawer"], doc["seq"])


def ledger_doc(ledger: Ledger) -> dict[str, Any]:
    return {
        "id": ledger.recipient,
        "pk": ledger.recipient,
        "next": ledger.next_seq,
        "fence": ledger.fence,
        "claims": [[c.token, c.first_seq, c.last_seq, c.lease_until_s] for c in ledger.claims],
        "voids": [list(v) for v in ledger.voids],
        "heads": {cab: [h.drawer_id, h.ordinal, h.used] for cab, h in ledger.heads.items()},
        "containers": ledger.containers,
        # Beside `claims` (whose 4-element entries older versions read): each claim's events per
        # domain, and the events saved per domain. A version that does not know them drops them
        # when it writes the ledger, and `counting` then reads False: depth is queried instead.
        "claimCounts": {c.token: [list(d) for d in c.domains] for c in ledger.claims if c.domains},
        "saved": [list(d) for d in ledger.saved],
        "counting": ledger.counting,
    }


def ledger_from_doc(doc: dict[str, Any]) -> Ledger:
    return Ledger(
        recipient=doc["id"],
        next_seq=doc["next"],
        claims=tuple(
            Claim(t, f, last, lease, tuple((d, n) for d, n in doc.get("claimCounts", {}).get(t, ())))
            for t, f, last, lease in doc["claims"]
        ),
        voids=void_ranges(_void(v) for v in doc["voids"]),
        heads={cab: DrawerHead(d, o, u) for cab, (d, o, u) in doc["heads"].items()},
        containers=doc["containers"],
        saved=tuple((d, n) for d, n in doc.get("saved", ())),
        counting=bool(doc.get("counting", False)),
    )


def _void(stored: list[Any]) -> tuple[int, int, float]:
    """A stored void range; one written without its time (an older version) counts as old."""
    return (stored[0], stored[1], stored[2] if len(stored) > 2 else 0.0)
