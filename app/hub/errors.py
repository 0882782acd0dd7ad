"""Errors of the message hub; the subscription's retry/DLQ router decides by `retriable`."""

from __future__ import annotations

from app.errors import ConflictError, InvalidInput, NotFound, ServiceUnavailable

__all__ = [
    "BundleIdConflict",
    "BundleNotFound",
    "DuplicateEventConflict",
    "SaveInProgress",
    "SaveLeaseLost",
]


class DuplicateEventConflict(InvalidInput):
    """An event id was saved before with different content; never retriable (goes to the DLQ)."""


class SaveInProgress(ServiceUnavailable):
    """Another save holding these event ids has not finished yet; retry later."""


class SaveLeaseLost(ServiceUnavailable):
    """This save outlived its lease and its sequence range was voided; retrying saves it again."""


class BundleNotFound(NotFound):
    """The actor has no open (peeked, not dequeued) bundle with this id."""


class BundleIdConflict(ConflictError):
    """The supplied bundle id is already used by another bundle of this actor."""
