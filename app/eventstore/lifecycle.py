"""A stream's lifecycle beyond appends (Equinox's pruner and its peers' stream deletion), over the
storage port: dump what a stream holds, prune its oldest events, delete it. Pure over the port.

- **Prune** deletes the batches whose events all lie before an index, never the tip: a load goes
  on from the tip's unfolds (Snapshot, RollingState) or its events; a strategy that folds from
  the first event (Unoptimized) would then fold from the pruned point, so prune only streams whose
  access strategy keeps a state in the tip.
- **Delete** removes the batches, then the tip under If-Match: a delete cut anywhere leaves the
  tip (the stream still loads, as if pruned) and the next delete finishes it; a write that lands
  meanwhile makes the tip's delete fail (SyncConflict), and the stream stays with that write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.eventstore.errors import SyncConflict
from app.eventstore.model import EncodedEvent, TipDocument
from app.eventstore.ports import NOT_MODIFIED, StreamStorage, WriteConflict

__all__ = ["StreamDump", "delete_stream", "dump_stream", "prune_stream"]


@dataclass(frozen=True, slots=True)
class StreamDump:
    stream: str
    version: int  # the next event's index
    events: tuple[tuple[int, EncodedEvent], ...]  # (index, event), oldest first; pruned ones absent
    unfolds: tuple[tuple[int, EncodedEvent], ...]  # (version taken at, unfold)

    def as_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "version": self.version,
            "events": [{"i": i, **e.to_json()} for i, e in self.events],
            "unfolds": [{"i": i, **u.to_json()} for i, u in self.unfolds],
        }


async def _tip(storage: StreamStorage, stream: str) -> TipDocument | None:
    tip = await storage.read_tip(stream, None)
    return None if tip is None or tip is NOT_MODIFIED else tip


async def dump_stream(storage: StreamStorage, stream: str) -> StreamDump | None:
    """Everything the stream holds, as stored (None: no such stream)."""
    tip = await _tip(storage, stream)
    if tip is None:
        return None
    events: list[tuple[int, EncodedEvent]] = []
    async for page in storage.iter_batches(stream, 0, tip.index, descending=False):
        for batch in page:
            events.extend((batch.index + k, e) for k, e in enumerate(batch.events))
    events.extend((tip.index + k, e) for k, e in enumerate(tip.events))
    unfolds = tuple((u.index, u.event) for u in tip.unfolds)
    return StreamDump(stream, tip.next_index, tuple(events), unfolds)


async def prune_stream(storage: StreamStorage, stream: str, before_index: int) -> int:
    """Delete the batches whose events all lie before `before_index` (the tip's events always stay);
    how many events went."""
    tip = await _tip(storage, stream)
    if tip is None:
        return 0
    limit = min(before_index, tip.index)
    doomed = [
        batch
        async for page in storage.iter_batches(stream, 0, limit, descending=False)
        for batch in page
        if batch.next_index <= limit
    ]
    for batch in doomed:  # oldest first: a cut prune leaves a stream pruned less far
        await storage.delete_batch(stream, batch.index)
    return sum(len(batch.events) for batch in doomed)


async def delete_stream(storage: StreamStorage, stream: str) -> int:
    """Delete every document of the stream, its batches first and its tip last; how many events
    went. SyncConflict when a write landed while it ran (the stream then stays)."""
    tip = await _tip(storage, stream)
    if tip is None:
        return 0
    removed = await prune_stream(storage, stream, tip.index)
    if tip.etag is None:
        raise SyncConflict(f"stream {stream!r}: its tip has no etag to delete it by")
    try:
        await storage.delete_tip(stream, tip.etag)
    except WriteConflict as exc:
        raise SyncConflict(
            f"stream {stream!r} was written while being deleted; run the delete again"
        ) from exc
    return removed + len(tip.events)
