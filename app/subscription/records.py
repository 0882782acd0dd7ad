"""What a subscription's endpoints receive (`SubscriptionMessage`); the headers of its RQ/DLQ
copies are the ordered-delivery engine's (`app.ordered.records`)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SubscriptionMessage"]


@dataclass(frozen=True, slots=True)
class SubscriptionMessage:
    """One message handed to an endpoint. `message_id` is stable across retries and DLQ.
    `owner_epoch`: the epoch of the shard's lease that delivers it (`app.ordered.lease`), higher
    after every takeover; an endpoint may refuse a lower one than it has seen. None outside a
    worker (no owner log)."""

    subscription: str
    group_id: str
    message_id: str
    payload: bytes
    attempt: int  # 1 for the first delivery attempt
    headers: dict[str, str] = field(default_factory=dict)
    owner_epoch: int | None = None
