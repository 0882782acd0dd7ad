"""The one error hierarchy. Every error hubstream raises derives from HubstreamError.

`retriable` tells the retry/DLQ router (and callers) whether trying again may succeed.
`http_status` is the status the web layer answers with when the error reaches it.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ConfigError",
    "ConflictError",
    "HubstreamError",
    "InvalidInput",
    "NotFound",
    "ServiceUnavailable",
]


class HubstreamError(Exception):
    """Root of every hubstream error."""

    retriable: ClassVar[bool] = False
    http_status: ClassVar[int] = 500


class ConfigError(HubstreamError):
    """A setting is missing or wrong; the message names the setting to change."""

    http_status = 500


class InvalidInput(HubstreamError):
    """Input from a user or another system is malformed or out of range."""

    http_status = 400


class NotFound(HubstreamError):
    """The named entity does not exist."""

    http_status = 404


class ConflictError(HubstreamError):
    """The request conflicts with the entity's current state."""

    http_status = 409


class ServiceUnavailable(HubstreamError):
    """A backing service (Kafka, Cosmos DB, MySQL) did not answer; trying again may work, after
    `retry_after_s` when the service said how long (the web layer's Retry-After)."""

    retriable = True
    http_status = 503
    retry_after_s: float | None = None  # also for subclasses with an __init__ of their own

    def __init__(self, *args: object, retry_after_s: float | None = None) -> None:
        super().__init__(*args)
        self.retry_after_s = retry_after_s
