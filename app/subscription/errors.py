"""Errors of subscriptions and their endpoints; `retriable` decides retry (RQ) versus DLQ."""

from __future__ import annotations

from app.errors import ConflictError, InvalidInput, NotFound, ServiceUnavailable
from app.ordered.errors import DeliveryFailed

__all__ = [
    "EndpointRejected",
    "EndpointUnavailable",
    "InternalTopicTaken",
    "InvalidSubscription",
    "NotAttempted",
    "SubscriptionExists",
    "SubscriptionNotStopped",
    "UnknownSubscription",
]


class InvalidSubscription(InvalidInput):
    """A subscription definition or operation argument is out of range."""


class UnknownSubscription(NotFound):
    """No subscription by that name."""


class SubscriptionExists(ConflictError):
    """A subscription by that name already exists."""


class InternalTopicTaken(ConflictError):
    """The composite topic a new subscription's RQ or DLQ would be exists and holds records (kept
    by an earlier subscription of the name, or a topic of the user's)."""


class SubscriptionNotStopped(ConflictError):
    """The operation needs the subscription stopped first."""


class EndpointUnavailable(DeliveryFailed, ServiceUnavailable):
    """The endpoint timed out or answered 408, 429 or 5xx; trying again may work."""

    retriable = True
    http_status = 503


class EndpointRejected(DeliveryFailed, InvalidInput):
    """The endpoint refused the message for good (a 4xx other than 408/429, or invalid payload)."""

    retriable = False
    http_status = 400


class NotAttempted(DeliveryFailed):
    """A batch sink did not try this message because an earlier one of its group failed in the batch."""

    retriable = True
