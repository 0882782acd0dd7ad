"""MessageHub: save DataAvailable events; actors peek and dequeue bundles of them.

`save` is the in-process endpoint a subscription calls; it is idempotent by event id.
Peek/dequeue record the bundle lifecycle in the actor's BundleLog (event store).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.cosmos import CosmosStore, open_cosmos
from app.dataavailable import DOMAINS, DataAvailable
from app.errors import InvalidInput, ServiceUnavailable
from app.hub.actor import (
    ActorBundles,
    BundleDequeued,
    decide_dequeue,
    decide_dequeue_then_peek,
    decide_peek,
    evolve,
    open_bundle_for,
)
from app.hub.bundle_stream import EventStoreBundleLog
from app.hub.bundling import BundleBuilder, BundleRef
from app.hub.cosmos_io import HubContainers
from app.hub.depths import HubDepths, count_depths
from app.hub.errors import BundleIdConflict, BundleNotFound
from app.hub.model import StoredEvent
from app.hub.ports import BundleLog
from app.hub.reclaim import ReclaimReport
from app.hub.repository import HubRepository, RepositoryOptions, SaveResult
from app.settings import Settings

MAX_PEEK_ATTEMPTS = 8
CACHED_BUNDLES_S = 60.0  # how old the bundles this worker holds may be for a dequeue to start from them

__all__ = ["MessageHub", "PeekedBundle", "SaveResult", "parse_bundle_id", "parse_domains", "parse_peek"]


@dataclass(frozen=True, slots=True)
class PeekedBundle:
    ref: BundleRef
    events: tuple[StoredEvent, ...]

    @property
    def bundle_id(self) -> str:
        return self.ref.bundle_id


def parse_bundle_id(value: str | None) -> str | None:
    """A bundle id given as a query parameter; an empty one is as malformed as any non-GUID."""
    if value is None:
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError as exc:
        raise InvalidInput(f"bundleId {value[:80]!r} is not a GUID") from exc


def parse_peek(value: str) -> tuple[str, ...]:
    """The domains a dequeue asks to peek next: `all`, or one domain."""
    if value == "all":
        return DOMAINS
    if value.lower() not in DOMAINS:
        raise InvalidInput(f"peek {value[:40]!r} is not all or one of {', '.join(DOMAINS)}")
    return parse_domains(value)


def parse_domains(domain: str | None) -> tuple[str, ...]:
    if domain is None:
        return DOMAINS
    lowered = domain.lower()
    if lowered not in DOMAINS:
        raise InvalidInput(f"domain {domain[:40]!r} is not one of {', '.join(DOMAINS)}")
    return (lowered,)


class MessageHub:
    def __init__(
        self,
        repository: HubRepository[Any],
        bundle_log: BundleLog,
        store: CosmosStore | None = None,
    ) -> None:
        self.repository = repository
        self.bundle_log = bundle_log
        self._store = store

    @classmethod
    async def open(
        cls, settings: Settings, *, store: CosmosStore | None = None, bundle_log: BundleLog | None = None
    ) -> MessageHub:
        """Open the hub's containers (created on first use); closes the store only if it opened it."""
        if store is not None:
            return await cls._open_on(settings, store, bundle_log, owned=False)
        cosmos = await open_cosmos(settings)
        try:
            return await cls._open_on(settings, cosmos, bundle_log, owned=True)
        except BaseException:
            await cosmos.close()  # else its HTTP session is left open ("Unclosed client session")
            raise

    @classmethod
    async def _open_on(
        cls, settings: Settings, cosmos: CosmosStore, bundle_log: BundleLog | None, *, owned: bool
    ) -> MessageHub:
        prefix = settings.hub_container_prefix
        names = ("drawers", "catalog", "ledgers", "ids")
        drawers, catalog, ledgers, ids = await asyncio.gather(
            *(cosmos.container(f"{prefix}-{n}", "/pk", item_ttl=n == "ids") for n in names)
        )
        shards = settings.hub_event_shards
        events = await asyncio.gather(
            *(cosmos.container(f"{prefix}-events" + (f"-{i}" if i else ""), "/pk") for i in range(shards))
        )
        io = HubContainers(
            events,
            drawers,
            catalog,
            ledgers,
            ids,
            write_gate=asyncio.Semaphore(settings.hub_save_concurrency),
        )
        options = RepositoryOptions(
            drawer_capacity=settings.hub_drawer_capacity,
            parallel_drawers=settings.hub_parallel_drawers,
            page_size=settings.hub_read_page_size,
            lease_s=settings.hub_save_lease_s,
            save_recipients=settings.hub_save_recipients,
            defer_acks=settings.hub_defer_acks,
            dedup_window_s=settings.hub_dedup_window_s,
            expire_index_by_sweep_for_embedded_cosmos=settings.embedded_cosmos,
        )
        log = bundle_log or await EventStoreBundleLog.open(cosmos, f"{prefix}-bundle-streams")
        return cls(HubRepository(io, options), log, cosmos if owned else None)

    async def close(self) -> None:
        await self.bundle_log.close()
        if self._store is not None:
            await self._store.close()

    @property
    def requests(self) -> int:
        """Cosmos requests this hub has issued so far."""
        return self.repository.io.counter.total + self.bundle_log.requests

    async def save(self, events: Sequence[DataAvailable]) -> SaveResult:
        """Store events for peeking, keeping each recipient's order; idempotent by event id."""
        return await self.repository.save(events)

    async def peek(
        self, actor: str, domains: Sequence[str] = DOMAINS, bundle_id: str | None = None
    ) -> PeekedBundle | None:
        """The actor's open bundle for these domains, else a new one; None when nothing is available.

        The first attempt starts from the actor's bundles as this worker last read or wrote them
        (an actor drains through one worker: its last dequeue wrote them here), without reading the
        stream. Recording a new bundle is an If-Match append, which fails on a stale state and
        decides again on the stream as it is; any other answer from them is checked on a fresh
        read first."""
        fresh = False
        for _ in range(MAX_PEEK_ATTEMPTS):
            state = await self.bundle_log.load(actor, allow_stale_s=0.0 if fresh else CACHED_BUNDLES_S)
            checked, fresh = fresh, True
            try:
                existing = open_bundle_for(state, domains, bundle_id)
            except BundleIdConflict:
                if checked:
                    raise
                continue
            if existing is not None:
                if not checked:
                    continue
                return PeekedBundle(existing, await self.repository.read_bundle(existing))
            candidate = await self.repository.next_unacknowledged(
                actor,
                domains,
                bundle_id or str(uuid.uuid4()),
                BundleBuilder(),
                state.dequeues,
                state.deferred_acks(),
            )
            if candidate is None:
                if checked or await self._nothing_since(actor, domains, bundle_id, state):
                    return None
                continue
            recorded = await self.bundle_log.decide(
                actor, decide_peek(candidate.ref, domains, state.dequeues)
            )
            if recorded is None:
                continue  # a dequeue came in between: the candidate may hold acknowledged events
            if recorded is candidate.ref:
                return PeekedBundle(candidate.ref, candidate.events)
            if not checked:
                continue  # decided on the cached state without a write: read the stream
            if bundle_id is not None and recorded.bundle_id != bundle_id:
                raise BundleIdConflict(
                    f"bundle {recorded.bundle_id} was opened by a concurrent peek; dequeue it before"
                    " peeking with a new bundle id"
                )
            return PeekedBundle(recorded, await self.repository.read_bundle(recorded))
        raise ServiceUnavailable(f"actor {actor}: bundles kept changing during the peek; try again")

    async def _nothing_since(
        self, actor: str, domains: Sequence[str], bundle_id: str | None, seen: ActorBundles
    ) -> bool:
        """Whether "nothing available", found from the cached `seen`, holds on the stream as it is:
        no bundle opened and no dequeue since."""
        state = await self.bundle_log.load(actor)
        return state.dequeues == seen.dequeues and open_bundle_for(state, domains, bundle_id) is None

    async def dequeue(self, actor: str, bundle_id: str) -> None:
        """Acknowledge the actor's open bundle; BundleNotFound when it has none with this id.

        Idempotent: a dequeue repeated after a lost answer finds the bundle among the actor's
        recently dequeued ones and succeeds again without touching anything.

        The worker that answered the peek holds the actor's bundles as its peek wrote them (actors
        stay on one worker), so the dequeue starts from them without reading the stream. That is
        safe when they are stale: acknowledging a bundle twice changes nothing, and the If-Match
        append re-runs the decision on the stream as it is. A bundle they do not know of is
        looked up afresh."""
        state = await self.bundle_log.load(actor, allow_stale_s=CACHED_BUNDLES_S)
        ref = state.find(bundle_id)
        if ref is None:
            state = await self.bundle_log.load(actor)
            ref = state.find(bundle_id)
        if ref is None:
            if bundle_id in state.dequeued_ids:
                return
            raise BundleNotFound(f"no peeked bundle {bundle_id} for this actor")
        later = await self.repository.acknowledge(ref, state.dequeues + 1, state.deferred_acks())
        if not await self.bundle_log.decide(actor, decide_dequeue(BundleDequeued(bundle_id, later))):
            self.repository.forget_board(actor)  # dequeued elsewhere: the count is not this one's

    async def dequeue_and_peek(
        self, actor: str, bundle_id: str, domains: Sequence[str] = DOMAINS
    ) -> PeekedBundle | None:
        """Dequeue, then peek the next bundle for `domains` (None when nothing is available).

        An actor draining its queue peeks right after each dequeue. Done in one call, the next
        bundle is formed once the dequeued one's drawers are acknowledged, and the dequeue and the
        new bundle are recorded by one append to the actor's stream instead of two. When the
        stream changed in between (a dequeue or peek through another worker), the dequeue stands
        and an ordinary peek finds the next bundle. Repeating the call after a lost answer is as
        safe as repeating a dequeue: the bundle is found dequeued, and the peek shows the open one."""
        state = await self.bundle_log.load(actor, allow_stale_s=CACHED_BUNDLES_S)
        ref = state.find(bundle_id)
        after = evolve(state, BundleDequeued(bundle_id))
        if ref is None or open_bundle_for(after, domains, None) is not None:
            await self.dequeue(actor, bundle_id)
            return await self.peek(actor, domains)
        later = await self.repository.acknowledge(ref, after.dequeues, state.deferred_acks())
        closed = BundleDequeued(bundle_id, later)
        after = evolve(state, closed)
        candidate = await self.repository.next_unacknowledged(
            actor, domains, str(uuid.uuid4()), BundleBuilder(), after.dequeues, after.deferred_acks()
        )
        outcome = await self.bundle_log.decide(
            actor,
            decide_dequeue_then_peek(
                closed, candidate.ref if candidate is not None else None, domains, after.dequeues
            ),
        )
        if not outcome.dequeued:
            self.repository.forget_board(actor)  # dequeued elsewhere: the count is not this one's
        if not outcome.settled:
            return await self.peek(actor, domains)
        if outcome.bundle is None:
            return None
        if candidate is not None and outcome.bundle is candidate.ref:
            return PeekedBundle(candidate.ref, candidate.events)
        return PeekedBundle(outcome.bundle, await self.repository.read_bundle(outcome.bundle))

    async def depth(self, actor: str) -> dict[str, int]:
        state = await self.bundle_log.load(actor)
        return await self.repository.depth(actor, state.deferred_acks())

    async def reclaim(self, *, dry_run: bool = False) -> ReclaimReport:
        """Delete what actors acknowledged: the documents of every drained drawer (a dry run
        only reports them)."""
        return await self.repository.reclaim(dry_run=dry_run)

    async def depths(self, *, max_queried: int = 200) -> HubDepths:
        """Every actor's depth, exact, from the counts ledgers and bundle streams keep (depths.py)."""
        return await count_depths(
            self.repository.io,
            self.bundle_log.load,  # never a cached state: another worker may have dequeued since
            self.depth,
            max_queried=max_queried,
        )
