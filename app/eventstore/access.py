"""Access strategies: which events a load must read and which unfolds a write stores.

- Unoptimized: every event is read (a query over the batches plus the tip); no unfolds.
- LatestKnownEvent: every event is an origin; a load folds only the last one (in the tip).
- Snapshot: each write stores ``decider.unfold(state)`` in the tip; a load starts from the
  latest origin event or unfold, so it is one point read of the tip.
- RollingState: events are not stored at all; the tip's unfolds are the state, replaced on each
  write under the tip's etag. The stream version stays 0; the etag alone orders writes.
- Custom (Equinox's `AccessStrategy.Custom`): `transmute(events, state)` picks the events to store
  and the unfolds to write with them (events it drops live on only in the unfolds); `is_origin`
  says where a load may start. The version counts stored events only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.eventstore.decider import Decider
from app.eventstore.errors import EventStoreConfigError

__all__ = [
    "AccessStrategy",
    "Custom",
    "LatestKnownEvent",
    "RollingState",
    "Snapshot",
    "Unoptimized",
    "check_strategy",
    "check_ttl",
    "folds_stored_events_on",
    "origin_predicate",
    "transmute",
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


@dataclass(frozen=True)
class Custom:
    """Store what `transmute(events, state)` returns: (the decided events to keep in the stream,
    the unfolds to write in the tip); a load starts from the latest event or unfold `is_origin`
    accepts. RollingState is `transmute=lambda es, s: ([], unfold(s))`."""

    is_origin: Callable[[Any], bool]
    transmute: Callable[[Sequence[Any], Any], tuple[Sequence[Any], Sequence[Any]]]


AccessStrategy = Unoptimized | LatestKnownEvent | Snapshot | RollingState | Custom


def _always(event: Any) -> bool:
    return True


def _never(event: Any) -> bool:
    return False


def check_strategy(strategy: AccessStrategy, decider: Decider[Any, Any, Any]) -> None:
    if not isinstance(strategy, Unoptimized | LatestKnownEvent | Snapshot | RollingState | Custom):
        raise EventStoreConfigError(f"unknown access strategy {strategy!r}")
    if isinstance(strategy, Snapshot | RollingState) and decider.unfold is None:
        raise EventStoreConfigError(f"{type(strategy).__name__} access needs a Decider with an unfold")


def check_ttl(ttl_s: int | None, strategy: AccessStrategy) -> None:
    """A category's time to live: whole seconds, and only where loads start from the tip (an
    Unoptimized load reads every batch, and one expired would be missed without a word)."""
    if ttl_s is None:
        return
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1:
        raise EventStoreConfigError(f"ttl_s={ttl_s!r}: a category's TTL is a whole number of seconds, >= 1")
    if isinstance(strategy, Unoptimized):
        raise EventStoreConfigError(
            "a category TTL needs an access strategy that loads from the tip (Snapshot, RollingState, "
            "LatestKnownEvent or Custom): Unoptimized reads every batch, and expired ones would be missed"
        )


def origin_predicate(strategy: AccessStrategy, decider: Decider[Any, Any, Any]) -> Callable[[Any], bool]:
    if isinstance(strategy, Unoptimized):
        return _never
    if isinstance(strategy, LatestKnownEvent):
        return _always
    if isinstance(strategy, Custom):
        return strategy.is_origin
    return decider.is_origin


def transmute(
    strategy: AccessStrategy, decider: Decider[Any, Any, Any], events: Sequence[Any], state: Any
) -> tuple[list[Any], list[Any]]:
    """(events to store, unfolds to write) for a decision's `events` and the state they lead to."""
    if isinstance(strategy, Custom):
        stored, unfolds = strategy.transmute(events, state)
        return list(stored), list(unfolds)
    if not isinstance(strategy, Snapshot | RollingState) or decider.unfold is None:
        return list(events), []
    unfolded = list(decider.unfold(state))
    return ([] if isinstance(strategy, RollingState) else list(events)), unfolded


def folds_stored_events_on(strategy: AccessStrategy) -> bool:
    """May a reader holding the state at version v fold the stored events after v to catch up?
    Not where events are dropped (their effect lives only in the unfolds)."""
    return not isinstance(strategy, RollingState | Custom)
