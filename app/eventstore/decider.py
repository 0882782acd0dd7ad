"""The decider: how a category of streams folds events into state and decides new events."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["Decider"]

C = TypeVar("C")
S = TypeVar("S")
E = TypeVar("E")


def _never(event: Any) -> bool:
    return False


def _no_decision(command: Any, state: Any) -> Sequence[Any]:
    raise TypeError("this Decider has no decide function; use CategoryStore.decide(stream, fn)")


@dataclass(frozen=True)
class Decider(Generic[C, S, E]):
    """Pure functions of one category of streams.

    ``decide`` must be idempotent: after a conflict it runs again on the refreshed state.
    ``unfold`` renders events that rebuild the state on their own (snapshots) and ``is_origin``
    tells which events (stored or unfolded) a fold may start from with ``initial``.
    """

    initial: S
    evolve: Callable[[S, E], S]
    decide: Callable[[C, S], Sequence[E]] = _no_decision
    unfold: Callable[[S], Sequence[E]] | None = None
    is_origin: Callable[[E], bool] = _never

    def fold(self, state: S, events: Iterable[E]) -> S:
        for event in events:
            state = self.evolve(state, event)
        return state
