"""Breadth-first search over every reachable state of a pure model, checking an invariant in each.

A model gives its initial states and, for a state, every (label, next state) pair. States must be
hashable; a state reached twice is explored once. `explore` returns how many states it saw; a
violated invariant raises AssertionError naming the path (labels) that led to it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TypeVar

S = TypeVar("S", bound=Hashable)


@dataclass(frozen=True)
class Exploration:
    states: int
    transitions: int
    terminal: int


def explore(
    roots: Iterable[S],
    successors: Callable[[S], Iterable[tuple[str, S]]],
    invariant: Callable[[S], None],
    at_end: Callable[[S], None] = lambda state: None,
    limit: int = 5_000_000,
) -> Exploration:
    """Visit every state reachable from `roots`; `invariant` in each, `at_end` in each state
    without successors. Raises AssertionError with the path to the first violation."""
    parent: dict[S, tuple[S | None, str]] = {}
    queue: deque[S] = deque()
    for root in roots:
        if root not in parent:
            parent[root] = (None, "start")
            queue.append(root)
    transitions = terminal = 0

    def path_to(state: S) -> str:
        labels: list[str] = []
        at: S | None = state
        while at is not None:
            at, label = parent[at]
            labels.append(label)
        return " -> ".join(reversed(labels))

    while queue:
        state = queue.popleft()
        try:
            invariant(state)
            moves = list(successors(state))
            if not moves:
                terminal += 1
                at_end(state)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n  reached by: {path_to(state)}") from exc
        for label, after in moves:
            transitions += 1
            if after not in parent:
                parent[after] = (state, label)
                queue.append(after)
        if len(parent) > limit:
            raise AssertionError(f"more than {limit} states: lower the bound")
    return Exploration(len(parent), transitions, terminal)
