"""The cabinet reader: a cabinet's drawers read in order, up to N drawers fetched in parallel.

Each drawer is read by a partition-scoped query ordered by sequence number, page by page.
Pages of the next drawers are prefetched while the bundle still needs events, so a large
bundle reads up to `parallel_drawers` partitions at once and a small one reads little more
than it uses.

A drawer may start from a run of its events read before (`runs`: every event of the drawer
between its position and the run's last one, in order; events at or below the fence never
change). Its query then starts after the run and is sent only when the bundle needs more.
What was read and not taken is returned per drawer, as the next read's run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from app.hub.bundling import BundleBuilder
from app.hub.documents import EVENT_FIELDS, event_from_doc
from app.hub.model import DrawerState, StoredEvent
from app.hub.ports import HubStore

__all__ = ["CabinetRead", "read_cabinet"]

C = TypeVar("C")  # the store's container handle


@dataclass
class _DrawerCursor:
    drawer: DrawerState
    pages: AsyncIterator[list[dict[str, Any]]]
    buffered: deque[StoredEvent] = field(default_factory=deque)
    pending: asyncio.Task[list[dict[str, Any]] | None] | None = None
    exhausted: bool = False
    cached: bool = False  # started from a run: query only once the run is used up

    def fetch(self) -> None:
        if self.pending is None and not self.exhausted:
            self.pending = asyncio.ensure_future(_next_page(self.pages))

    def prefetch(self) -> None:
        if not (self.cached and self.buffered):
            self.fetch()

    async def take_page(self) -> None:
        self.fetch()
        assert self.pending is not None
        page = await self.pending
        self.pending = None
        if page is None:
            self.exhausted = True
        else:
            self.buffered.extend(event_from_doc(doc, self.drawer.drawer_id) for doc in page)

    async def aclose(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.pending
        aclose = getattr(self.pages, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


async def _next_page(pages: AsyncIterator[list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
    try:
        return await pages.__anext__()
    except StopAsyncIteration:
        return None


@dataclass(frozen=True, slots=True)
class CabinetRead:
    events: tuple[StoredEvent, ...]
    next_seen: dict[str, int]  # drawer -> first event the bundle did not take
    rest: dict[str, tuple[StoredEvent, ...]] = field(default_factory=dict)  # drawer -> read, not taken


def _events_query(
    io: HubStore[C],
    container: C,
    drawer: DrawerState,
    after: int,
    upto_seq: int,
    page_size: int,
) -> AsyncIterator[list[dict[str, Any]]]:
    sql = (
        f"SELECT {EVENT_FIELDS} FROM c WHERE c.pk = @pk AND c.seq > @after AND c.seq <= @upto ORDER BY c.seq"
    )
    params = {"@pk": drawer.drawer_id, "@after": after, "@upto": upto_seq}
    return io.pages(container, sql, drawer.drawer_id, params, page_size)


def _cursor(
    io: HubStore[C],
    container: C,
    drawer: DrawerState,
    run: Sequence[StoredEvent],
    fence: int,
    page_size: int,
) -> _DrawerCursor:
    ahead = [s for s in run if drawer.ack_seq < s.seq <= fence]
    after = ahead[-1].seq if ahead else drawer.ack_seq
    pages = _events_query(io, container, drawer, after, fence, page_size)
    # A run reaching the drawer's last event (or the fence) leaves nothing to query for: the drawer
    # document was read or written after every save below the fence had written it.
    done = bool(ahead) and after >= min(drawer.last_seq, fence)
    return _DrawerCursor(drawer, pages, deque(ahead), exhausted=done, cached=bool(ahead))


def _needed(builder: BundleBuilder) -> int:
    """Events the bundle may still take, estimated from the average weight taken so far."""
    left = builder.max_events - len(builder.events)
    if builder.events:
        average = max(1, builder.weight // len(builder.events))
        left = min(left, (builder.max_weight - builder.weight) // average + 1)
    return max(left, 1)


async def read_cabinet(
    io: HubStore[C],
    container_of: Callable[[DrawerState], C],
    drawers: Sequence[DrawerState],
    builder: BundleBuilder,
    *,
    fence: int,
    is_void: Callable[[int], bool],
    parallel_drawers: int,
    page_size: int,
    runs: Mapping[str, Sequence[StoredEvent]] | None = None,
) -> CabinetRead:
    """Offer the drawers' unacknowledged events (up to the fence) to `builder` in sequence order."""
    known = runs or {}
    cursors = [_cursor(io, container_of(d), d, known.get(d.drawer_id, ()), fence, page_size) for d in drawers]
    next_seen: dict[str, int] = {}
    try:
        for index, cursor in enumerate(cursors):
            while not builder.closed:
                if not cursor.buffered:
                    if cursor.exhausted:
                        break
                    _prefetch(cursors[index : index + parallel_drawers], builder)
                    await cursor.take_page()
                    continue
                stored = cursor.buffered.popleft()
                if is_void(stored.seq):
                    continue
                if not builder.offer(stored):
                    cursor.buffered.appendleft(stored)  # kept for the next read
                    next_seen[cursor.drawer.drawer_id] = stored.seq
                    break
            if builder.closed:
                if cursor.drawer.drawer_id not in next_seen:
                    follower = await _next_valid(cursor, is_void)
                    if follower is not None:
                        next_seen[cursor.drawer.drawer_id] = follower
                break
    finally:
        await asyncio.gather(*(c.aclose() for c in cursors))
    # Voided events are left out of the runs kept for the next read: the reclaim sweep may drop
    # their ranges from the ledger (once it deleted them), and a run must not outlive that.
    rest = {
        c.drawer.drawer_id: run
        for c in cursors
        if (run := tuple(e for e in c.buffered if not is_void(e.seq)))
    }
    return CabinetRead(tuple(builder.events), next_seen, rest)


def _prefetch(window: Sequence[_DrawerCursor], builder: BundleBuilder) -> None:
    """Keep one page fetch in flight for each drawer of the window while the bundle needs more."""
    needed = _needed(builder)
    ahead = 0
    for cursor in window:
        if ahead >= needed:
            return
        cursor.prefetch()
        ahead += len(cursor.buffered) + (cursor.drawer.used if cursor.pending is not None else 0)


async def _next_valid(cursor: _DrawerCursor, is_void: Callable[[int], bool]) -> int | None:
    while True:
        if cursor.buffered:
            stored = cursor.buffered[0]
            if not is_void(stored.seq):
                return stored.seq
            cursor.buffered.popleft()
            continue
        if cursor.exhausted:
            return None
        await cursor.take_page()
