"""Equinox-style event store on Cosmos DB: streams with a tip, unfolds and optimistic sync.

See docs/eventstore.md. Pure parts: Decider, Codec, access strategies, Cache, document model and
the engine (through the StreamStorage port); the Cosmos adapter is CosmosEventStore.
"""

from app.eventstore.access import (
    AccessStrategy,
    Custom,
    LatestKnownEvent,
    RollingState,
    Snapshot,
    Unoptimized,
)
from app.eventstore.cache import Cache
from app.eventstore.codec import Codec
from app.eventstore.cosmos import CosmosEventStore, CosmosStreamStorage, RequestStats, open_event_store
from app.eventstore.decider import Decider
from app.eventstore.engine import CategoryStore, EventStore, Loaded, StoreOptions
from app.eventstore.errors import (
    CorruptStream,
    EventDecodeError,
    EventStoreConfigError,
    InvalidStreamName,
    StoreUnavailable,
    SyncConflict,
    UnknownEventCase,
)
from app.eventstore.feed import FeedEvent, feed_events
from app.eventstore.memory import MemoryStreamStorage

__all__ = [
    "AccessStrategy",
    "Cache",
    "CategoryStore",
    "Codec",
    "CorruptStream",
    "CosmosEventStore",
    "CosmosStreamStorage",
    "Custom",
    "Decider",
    "EventDecodeError",
    "EventStore",
    "EventStoreConfigError",
    "FeedEvent",
    "InvalidStreamName",
    "LatestKnownEvent",
    "Loaded",
    "MemoryStreamStorage",
    "RequestStats",
    "RollingState",
    "Snapshot",
    "StoreOptions",
    "StoreUnavailable",
    "SyncConflict",
    "UnknownEventCase",
    "Unoptimized",
    "feed_events",
    "open_event_store",
]
