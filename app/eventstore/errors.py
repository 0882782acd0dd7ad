"""Errors of the event store."""

from __future__ import annotations

from app.errors import ConfigError, ConflictError, HubstreamError, InvalidInput, ServiceUnavailable

__all__ = [
    "CorruptStream",
    "EventDecodeError",
    "EventStoreConfigError",
    "InvalidStreamName",
    "StoreUnavailable",
    "SyncConflict",
    "UnknownEventCase",
]


class UnknownEventCase(InvalidInput):
    """An event's case name (or type) is not one the codec knows."""


class EventDecodeError(InvalidInput):
    """An event's JSON data does not fit the type its case names."""


class InvalidStreamName(InvalidInput):
    """A stream name is empty, too long or contains control characters."""


class CorruptStream(HubstreamError):
    """A stored document of the stream is malformed; nothing was written over it."""

    http_status = 500


class SyncConflict(ConflictError):
    """Other writers kept changing the stream; the append gave up after its bounded retries."""

    retriable = True


class EventStoreConfigError(ConfigError):
    """A category is configured inconsistently (e.g. Snapshot access without an unfold)."""


class StoreUnavailable(ServiceUnavailable):
    """The document store failed a request (throttled, timed out or errored); retry later."""
