"""Errors of the batch tracker; each maps to an HTTP status through HubstreamError."""

from __future__ import annotations

from app.errors import ConflictError, InvalidInput, NotFound, ServiceUnavailable

__all__ = [
    "BatchClosed",
    "BatchNotFound",
    "ItemNotFound",
    "MalformedItemId",
    "OperationTooLarge",
    "PartitionNotReady",
]


class BatchNotFound(NotFound):
    """No batch with this id exists (never created, deleted, or reaped)."""


class ItemNotFound(NotFound):
    """The item id is well formed but names no item group or index of its batch."""


class MalformedItemId(InvalidInput):
    """An item id is not of the form `batchId:groupUuid:index`."""


class BatchClosed(ConflictError):
    """Items cannot be added to a closed batch."""


class OperationTooLarge(InvalidInput):
    """An operation whose writes do not fit in one changelog record (its intent); nothing is written."""


class PartitionNotReady(ServiceUnavailable):
    """The table partition owning the batch is recovering or moving to another worker; retry."""
