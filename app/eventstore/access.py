"""Access strategies: which events a load must read and which unfolds a write stores.

- Unoptimized: every event is read (a query over the batches plus the tip); no unfolds.
- LatestKnownEvent: every event is an origin; a load folds only the last one (in the tip).
- Snapshot: each write stores ``decider.unfold(state)`` in the tip; a load starts from the
  latest origin event or unfold, so it is one point read of the tip.
- RollingState: events are not stored at all; the tip's unfolds are the state, replaced on each
  write under the tip's etag. The stream version stays 0; the etag alone orders writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.eventstore.decider import Decider
from app.eventstore.errors import EventStoreConfigError

__all__ = [
    "AccessStrategy",
    "LatestKnownEvent",
    "RollingState",
    "Snapshot",
    "Unoptimized",
    "check_strategy",
    "origin_predicate",
    "unfolds_to_write",
]


@dataclass(frozen=True)
class Unoptimized:
    """Read every event of the stream on load; write no unfolds."""


@dataclass(frozen=True)
class LatestKnownEvent:
    """The latest event alone is the state: a load folds only the tip's last event."""


@dataclass(frozen=True)
class Snapshot:
    """Store ``decider.unfold(state)`` in the tip with each write; loads start from it."""


@dataclass(frozen=True)
class RollingState:
    """Store only ``decider.unfold(state)`` in the tip; decided events are not kept."""


AccessStrategy = Unoptimized | LatestKnownEvent | Snapshot | RollingState


def _always(event: Any) -> bool:
    return True


def _never(event: Any) -> bool:
    return False


def check_strategy(strategy: AccessStrategy, decider: Decider[Any, Any, Any]) -> None:
    if not isinstance(strategy, Unoptimized | LatestKnownEvent | Snapshot | RollingState):
        raise EventStoreConfigError(f"unknown access strategy {strategy!r}")
    if isinstance(strategy, Snapshot | RollingState) and decider.unfold is None:
        raise EventStoreConfigError(f"{type(strategy).__name__} access needs a Decider with an unfold")


def origin_predicate(strategy: AccessStrategy, decider: Decider[Any, Any, Any]) -> Callable[[Any], bool]:
    if isinstance(strategy, Unoptimized):
        return _never
    if isinstance(strategy, LatestKnownEvent):
        return _always
    return decider.is_origin


def unfolds_to_write(strategy: AccessStrategy, decider: Decider[Any, Any, Any], state: Any) -> Sequence[Any]:
    if isinstance(strategy, Snapshot | RollingState) and decider.unfold is not None:
        return decider.unfold(state)
    return ()
