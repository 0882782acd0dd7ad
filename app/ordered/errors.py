"""Errors of the ordered-delivery engine; `retriable` decides retry (RQ) versus DLQ."""

from __future__ import annotations

from app.errors import HubstreamError, InvalidInput

__all__ = ["CopyRefused", "DeliveryFailed", "InvalidPolicy", "UndecodableMessage", "UndecodableState"]


class InvalidPolicy(InvalidInput):
    """A retry policy or delivery setting is out of range."""


class DeliveryFailed(HubstreamError):
    """The endpoint or handler did not take the message; `retriable` decides retry versus DLQ.
    `status` (an HTTP status, None where there is none) and `timed_out` let the retry policy
    decide by what the endpoint answered."""

    status: int | None = None
    timed_out: bool = False


class UndecodableMessage(InvalidInput):
    """A record lacks an ordering key (group id) or the headers a retry/DLQ copy must carry."""


class UndecodableState(InvalidInput):
    """A stored group state that does not decode (a field missing, a position holding a null).
    Its readers take it as a write that never landed: the group's previous state stands."""


class CopyRefused(HubstreamError):
    """The retry or dead-letter queue refused a copy for good (too large, say): trying again
    would hold the group for ever."""
