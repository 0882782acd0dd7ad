"""The hub's depth over every actor, exact and without reading an event: a recipient's ledger
counts the events of each released save, the actor's bundle stream those of each dequeued bundle
(app/hub/counts.py), and the depth is the difference. One read of each ledger (a read feed) and of
each actor's stream tip (a point read, cached), whatever the number of waiting events.

A recipient whose ledger or stream an older version wrote kept no count: its depth is queried
instead (MessageHub.depth: one query per open drawer), for at most `max_queried` of them; the rest
are reported as not measured. An event counts from the moment its save released its claim; while
an earlier save of the recipient still holds the fence, the actor cannot peek it yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.hub.actor import ActorBundles
from app.hub.counts import depth_of
from app.hub.documents import ledger_from_doc
from app.hub.ports import HubStore

__all__ = ["HubDepths", "count_depths"]

CONCURRENCY = 16  # actors' streams read at once


@dataclass(frozen=True, slots=True)
class HubDepths:
    by_actor: Mapping[str, Mapping[str, int]]  # actor -> domain -> unacknowledged events (measured)
    queried: int = 0  # actors whose depth was queried (no count kept)
    not_measured: tuple[str, ...] = ()  # beyond `max_queried`
    by_domain: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_domain.values())


async def count_depths(
    io: HubStore[Any],
    load_actor: Callable[[str], Awaitable[ActorBundles]],
    query_depth: Callable[[str], Awaitable[dict[str, int]]],
    *,
    max_queried: int = 200,
) -> HubDepths:
    """Every recipient's depth from the counts (queried where none is kept)."""
    gate = asyncio.Semaphore(CONCURRENCY)
    ledgers = [ledger_from_doc(doc) async for doc in io.read_all(io.ledgers)]

    async def counted(recipient: str, saved: Any, counting: bool) -> dict[str, int] | None:
        async with gate:
            state = await load_actor(recipient)
        return depth_of(saved, state.acknowledged) if counting and state.counting else None

    counts = await asyncio.gather(*(counted(le.recipient, le.saved, le.counting) for le in ledgers))
    by_actor: dict[str, Mapping[str, int]] = {}
    uncounted: list[str] = []
    for ledger, depth in zip(ledgers, counts, strict=True):
        if depth is None:
            uncounted.append(ledger.recipient)
        else:
            by_actor[ledger.recipient] = depth
    uncounted.sort()
    queried = uncounted[:max_queried]

    async def query(recipient: str) -> dict[str, int]:
        async with gate:
            return await query_depth(recipient)

    for recipient, depth in zip(queried, await asyncio.gather(*(query(r) for r in queried)), strict=True):
        by_actor[recipient] = depth
    by_domain: dict[str, int] = {}
    for actor_depth in by_actor.values():
        for domain, n in actor_depth.items():
            by_domain[domain] = by_domain.get(domain, 0) + n
    return HubDepths(by_actor, len(queried), tuple(uncounted[max_queried:]), dict(sorted(by_domain.items())))
