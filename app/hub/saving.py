"""Idempotent save decisions: which events of a request are new, already saved, or conflicting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.dataavailable import DataAvailable
from app.hub.errors import DuplicateEventConflict, SaveInProgress
from app.hub.model import Ledger, content_hash

__all__ = ["IndexEntry", "SavePlan", "plan_save"]


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """What the event-id index remembers of a saved event."""

    content_hash: str
    seq: int
    token: str
    etag: str = ""  # of the index document, to take an entry of a voided save over under If-Match


@dataclass(frozen=True, slots=True)
class SavePlan:
    to_place: tuple[DataAvailable, ...]
    duplicates: int


def plan_save(events: Sequence[DataAvailable], index: Mapping[str, IndexEntry], ledger: Ledger) -> SavePlan:
    """Split one recipient's events (in order) into new ones and no-op duplicates.

    `index` holds the index entry found per id; entries of voided saves count as absent.
    Raises DuplicateEventConflict (never retriable) naming every id saved before with other
    content, and SaveInProgress (retriable) when an id belongs to a save still holding its claim.
    """
    seen: dict[str, str] = {}
    conflicts: list[str] = []
    busy: list[str] = []
    to_place: list[DataAvailable] = []
    duplicates = 0
    for event in events:
        digest = content_hash(event)
        if event.id in seen:
            if seen[event.id] != digest:
                conflicts.append(event.id)
            else:
                duplicates += 1
            continue
        seen[event.id] = digest
        entry = index.get(event.id)
        if entry is None or ledger.is_void(entry.seq):
            to_place.append(event)
        elif entry.content_hash != digest:
            conflicts.append(event.id)
        elif ledger.claim_of(entry.seq) is not None:
            busy.append(event.id)
        else:
            duplicates += 1
    if conflicts:
        shown = ", ".join(conflicts[:5]) + (f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
        raise DuplicateEventConflict(f"event id(s) {shown} were saved before with different content")
    if busy:
        raise SaveInProgress(f"event {busy[0]} is being saved by another worker; retry shortly")
    return SavePlan(tuple(to_place), duplicates)
