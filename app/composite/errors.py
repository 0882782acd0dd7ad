"""Errors of composite topics."""

from __future__ import annotations

from app.errors import ConflictError, InvalidInput, NotFound

__all__ = [
    "CompositeTopicExists",
    "InvalidGroupId",
    "InvalidPartitionCount",
    "InvalidPayload",
    "ReadPointerOutOfRange",
    "UnknownCompositeTopic",
]


class InvalidPartitionCount(InvalidInput):
    """A storage topic needs 1, 2, 3 or a multiple of 4 or 6 partitions."""


class InvalidGroupId(InvalidInput):
    """A group id is empty or longer than MAX_GROUP_ID_BYTES."""


class InvalidPayload(InvalidInput):
    """A payload is not bytes/JSON or is larger than MAX_PAYLOAD_BYTES."""


class UnknownCompositeTopic(NotFound):
    """No composite topic by that name."""


class CompositeTopicExists(ConflictError):
    """A composite topic by that name already exists."""


class ReadPointerOutOfRange(InvalidInput):
    """Consume was asked for a storage topic, partition or offset that does not exist."""
