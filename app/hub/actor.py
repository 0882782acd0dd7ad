"""An actor's bundle lifecycle as an event-sourced decider: BundlePeeked, BundleDequeued.

State: the open (peeked, not dequeued) bundles, at most one per domain, the ids of recently
dequeued bundles so a reused bundle id is refused, and the acknowledgements of drawers that
are recorded here and not yet written to the drawers (`DeferredAck`, app/hub/model.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from app.hub.bundling import BundleRef
from app.hub.counts import add_counts
from app.hub.errors import BundleIdConflict
from app.hub.model import DeferredAck

__all__ = [
    "ActorBundles",
    "ActorEvent",
    "BundleDequeued",
    "BundlePeeked",
    "NextAfterDequeue",
    "decide_dequeue",
    "decide_dequeue_then_peek",
    "decide_peek",
    "evolve",
    "open_bundle_for",
]

REMEMBERED_DEQUEUED = 64


@dataclass(frozen=True, slots=True)
class BundlePeeked:
    bundle: BundleRef


@dataclass(frozen=True, slots=True)
class BundleDequeued:
    bundle_id: str
    deferred: tuple[DeferredAck, ...] = ()  # the bundle's drawers whose acknowledgement was not written


ActorEvent = BundlePeeked | BundleDequeued


@dataclass(frozen=True, slots=True)
class ActorBundles:
    open: tuple[BundleRef, ...] = ()
    dequeued_ids: tuple[str, ...] = ()
    dequeues: int = 0  # every dequeue ever: a peek computed before one may show acknowledged events
    deferred: tuple[DeferredAck, ...] = ()  # at most one per drawer
    # Events of the dequeued bundles per domain (app/hub/counts.py); `counting` is False for a
    # stream an older version started or wrote (it kept no count): True from the initial state.
    acknowledged: tuple[tuple[str, int], ...] = ()
    counting: bool = False

    def find(self, bundle_id: str) -> BundleRef | None:
        return next((b for b in self.open if b.bundle_id == bundle_id), None)

    def deferred_acks(self) -> dict[str, DeferredAck]:
        return {d.drawer_id: d for d in self.deferred}


def evolve(state: ActorBundles, event: ActorEvent) -> ActorBundles:
    if isinstance(event, BundlePeeked):
        return replace(state, open=(*state.open, event.bundle))
    # The dequeue wrote every drawer of the bundle it did not defer (or found it written before).
    closed = state.find(event.bundle_id)
    touched = {s.drawer_id for s in closed.slices} if closed is not None else set()
    acknowledged = state.acknowledged
    if closed is not None:
        acknowledged = add_counts(acknowledged, ((closed.domain, closed.event_count),))
    return replace(
        state,
        open=tuple(b for b in state.open if b.bundle_id != event.bundle_id),
        dequeued_ids=(*state.dequeued_ids, event.bundle_id)[-REMEMBERED_DEQUEUED:],
        dequeues=state.dequeues + 1,
        deferred=(*(d for d in state.deferred if d.drawer_id not in touched), *event.deferred),
        acknowledged=acknowledged,
    )


def open_bundle_for(state: ActorBundles, domains: Sequence[str], bundle_id: str | None) -> BundleRef | None:
    """The open bundle a peek for `domains` must return again, if any.

    A supplied id that is neither the open bundle's nor new is refused (409).
    """
    if bundle_id is not None and bundle_id in state.dequeued_ids:
        raise BundleIdConflict(f"bundle {bundle_id} was already dequeued; peek with a new bundle id")
    existing = next((b for b in state.open if b.domain in domains), None)
    if existing is None:
        if bundle_id is not None and state.find(bundle_id) is not None:
            raise BundleIdConflict(f"bundle {bundle_id} is open for another domain")
        return None
    if bundle_id is not None and bundle_id != existing.bundle_id:
        raise BundleIdConflict(
            f"bundle {existing.bundle_id} is still open for {existing.domain}; dequeue it before peeking"
            f" with a new bundle id"
        )
    return existing


def decide_peek(
    candidate: BundleRef, domains: Sequence[str], dequeues_seen: int
) -> Callable[[ActorBundles], tuple[BundleRef | None, list[ActorEvent]]]:
    """Record `candidate` unless a concurrent peek opened a bundle for these domains first (that
    one is the answer), or a dequeue happened since the candidate was read (None: its events
    may be acknowledged already, as the seed's commit trigger checks; read again)."""

    def decision(state: ActorBundles) -> tuple[BundleRef | None, list[ActorEvent]]:
        existing = next((b for b in state.open if b.domain in domains), None)
        if existing is not None:
            return existing, []
        if state.dequeues != dequeues_seen:
            return None, []
        return candidate, [BundlePeeked(candidate)]

    return decision


def decide_dequeue(closed: BundleDequeued) -> Callable[[ActorBundles], tuple[bool, list[ActorEvent]]]:
    """Close the bundle; False (no events) when it is no longer open."""

    def decision(state: ActorBundles) -> tuple[bool, list[ActorEvent]]:
        if state.find(closed.bundle_id) is None:
            return False, []
        return True, [closed]

    return decision


@dataclass(frozen=True, slots=True)
class NextAfterDequeue:
    """What a dequeue that also peeks decided. When `settled`, `bundle` is the peek's answer (None:
    nothing available); unsettled, an ordinary peek must find it."""

    dequeued: bool
    settled: bool = False
    bundle: BundleRef | None = None


def decide_dequeue_then_peek(
    closed: BundleDequeued, candidate: BundleRef | None, domains: Sequence[str], dequeues_seen: int
) -> Callable[[ActorBundles], tuple[NextAfterDequeue, list[ActorEvent]]]:
    """Close the bundle and record the next one with the same append.

    `candidate` (None: nothing was available) was formed after this dequeue acknowledged its
    drawers, for an actor whose dequeue count is `dequeues_seen` once this dequeue counts. As in
    `decide_peek`, it is recorded only when no other dequeue happened since and no bundle for these
    domains is open (that one is the answer). Every answer but "no longer open" writes, so the
    append's If-Match checks the state the answer was decided on."""

    def decision(state: ActorBundles) -> tuple[NextAfterDequeue, list[ActorEvent]]:
        if state.find(closed.bundle_id) is None:
            return NextAfterDequeue(dequeued=False), []
        after = evolve(state, closed)
        existing = next((b for b in after.open if b.domain in domains), None)
        if existing is not None:
            return NextAfterDequeue(True, True, existing), [closed]
        if after.dequeues != dequeues_seen:
            return NextAfterDequeue(True), [closed]
        if candidate is None:
            return NextAfterDequeue(True, True), [closed]
        return NextAfterDequeue(True, True, candidate), [closed, BundlePeeked(candidate)]

    return decision
