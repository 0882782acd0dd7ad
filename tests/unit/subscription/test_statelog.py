"""Loading group states from the state changelog: slot partitions are read interleaved in any
order, so every interleaving that keeps each slot's own order must give the same states.

A shard forgets a state with tombstones in every slot (others first, confirmed, then its own);
a shard-count change leaves older records of a group in other slots. Before, a tombstone deleted
the group whichever slot it came from: a group that failed again after being forgotten lost its
new state whenever another slot's tombstone was read after it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from app.subscription.statelog import Event, newest_states

OWN, OTHER, NEVER = 3, 5, 7  # the group's slot now; its slot before a shard-count change; another


Slots = dict[int, Sequence[dict[str, Any] | None]]


def _state(epoch: int, label: str) -> dict[str, Any]:
    return {"e": epoch, "s": label}


def _interleavings(slots: Slots) -> Iterator[list[Event]]:
    """Every order of the slots' records that keeps each slot's own order."""
    tags = [p for p, records in slots.items() for _ in records]
    for order in sorted(set(itertools.permutations(tags))):
        taken = dict.fromkeys(slots, 0)
        events: list[Event] = []
        for p in order:
            events.append((p, "g", slots[p][taken[p]]))
            taken[p] += 1
        yield events


CASES: dict[str, tuple[Slots, str | None]] = {
    "failed again after being forgotten": (
        {
            OWN: [_state(1, "old"), None, _state(1, "new")],
            OTHER: [_state(0, "stale"), None],
            NEVER: [None],
        },
        "new",
    ),
    "forgotten": ({OWN: [_state(1, "old"), None], OTHER: [_state(0, "stale"), None], NEVER: [None]}, None),
    "cut between the other slots' tombstones and its own": (
        {OWN: [_state(1, "kept")], OTHER: [_state(0, "stale"), None], NEVER: [None]},
        "kept",
    ),
    "moved by a shard-count change": ({OWN: [_state(1, "moved")], OTHER: [_state(0, "stale")]}, "moved"),
}


@pytest.mark.parametrize("case", CASES)
def test_every_interleaving_of_the_slots_gives_the_same_state(case: str) -> None:
    slots, want = CASES[case]
    orders = 0
    for events in _interleavings(slots):
        found = newest_states(events).get("g")
        assert (None if found is None else found[2]["s"]) == want, events
        orders += 1
    assert orders > 1
