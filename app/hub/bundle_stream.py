"""The actor's bundle lifecycle as an event-store stream: one stream per actor, category HubBundles.

Events BundlePeeked / BundleDequeued are decided; the folded ActorBundles is the tip's only
content (RollingState access), so a peek or dequeue loads the state with one point read of the
tip, writes it with one If-Match replace, and concurrent peeks/dequeues of one actor are
serialised by the tip's etag.

The events themselves are not kept. The drawers record what was acknowledged, with the positions
the tip holds for drawers not written yet (DeferredAck); a kept history
would grow by two events per bundle forever, and carrying ten of them in the tip made each tip
write twice as large, plus a batch document every five bundles (about a tenth of a worker's
CPU during a drain).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from app.cosmos import CosmosStore
from app.eventstore import Cache, Codec, Decider, RollingState, StoreOptions, open_event_store
from app.hub.actor import ActorBundles, ActorEvent, BundleDequeued, BundlePeeked, evolve

__all__ = ["CATEGORY", "EventStoreBundleLog", "bundles_decider", "stream_of"]

R = TypeVar("R")
CATEGORY = "HubBundles"
StreamEvent = BundlePeeked | BundleDequeued | ActorBundles


def stream_of(actor: str) -> str:
    return f"{CATEGORY}-{actor}"


def _evolve(state: ActorBundles, event: StreamEvent) -> ActorBundles:
    if isinstance(event, ActorBundles):
        return event  # the snapshot unfold
    return evolve(state, event)


bundles_decider: Decider[Any, ActorBundles, StreamEvent] = Decider(
    initial=ActorBundles(counting=True),  # a stream started by this version counts from its start
    evolve=_evolve,
    unfold=lambda state: [state],
    is_origin=lambda event: isinstance(event, ActorBundles),
)
bundles_codec: Codec[StreamEvent] = Codec(BundlePeeked, BundleDequeued, ActorBundles)


class EventStoreBundleLog:
    """BundleLog on app.eventstore."""

    def __init__(self, category: Any, store: Any = None) -> None:
        self._category = category
        self._store = store

    @property
    def requests(self) -> int:
        return int(self._store.stats.requests) if self._store is not None else 0

    @classmethod
    async def open(
        cls, cosmos: CosmosStore, container: str, cache_entries: int = 10_000
    ) -> EventStoreBundleLog:
        store = await open_event_store(
            cosmos, container=container, options=StoreOptions(max_events_in_tip=10)
        )
        category = store.category(
            CATEGORY,
            bundles_decider,
            bundles_codec,
            access=RollingState(),
            cache=Cache(max_entries=cache_entries),
        )
        return cls(category, store)

    async def load(self, actor: str, *, allow_stale_s: float = 0.0) -> ActorBundles:
        loaded = await self._category.load(stream_of(actor), allow_stale_s=allow_stale_s)
        state: ActorBundles = loaded.state
        return state

    async def decide(
        self, actor: str, decision: Callable[[ActorBundles], tuple[R, Sequence[ActorEvent]]]
    ) -> R:
        # The hub always loads the stream just before deciding, so the cached state is fresh; the
        # If-Match write still catches a concurrent writer and re-runs the decision.
        result: R = await self._category.decide(stream_of(actor), decision, assume_cached=True)
        return result

    async def close(self) -> None:
        return None
