"""The seed's Favorites example (Added, Removed, Compacted; unfold = Compacted; isOrigin)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from app.eventstore import Codec, Decider


@dataclass(frozen=True)
class Item:
    id: int
    name: str
    added: datetime


@dataclass(frozen=True)
class Added:
    item: Item


@dataclass(frozen=True)
class Removed:
    item_id: int


@dataclass(frozen=True)
class Compacted:
    items: tuple[Item, ...]


Event = Added | Removed | Compacted
State = tuple[Item, ...]


@dataclass(frozen=True)
class Add:
    id: int
    name: str
    added: datetime


@dataclass(frozen=True)
class Remove:
    id: int


Command = Add | Remove


def contains(state: State, item_id: int) -> bool:
    return any(x.id == item_id for x in state)


def evolve(state: State, event: Event) -> State:
    if isinstance(event, Compacted):
        return event.items
    if isinstance(event, Added):
        return (event.item, *state)
    return tuple(x for x in state if x.id != event.item_id)


def decide(command: Command, state: State) -> Sequence[Event]:
    if isinstance(command, Add):
        if contains(state, command.id):
            return []
        return [Added(Item(command.id, command.name, command.added))]
    return [Removed(command.id)] if contains(state, command.id) else []


def unfold(state: State) -> Sequence[Event]:
    return [Compacted(state)]


def is_origin(event: Event) -> bool:
    return isinstance(event, Compacted)


def keep_removals(events: Sequence[Event], state: State) -> tuple[list[Event], list[Event]]:
    """A Custom access strategy's transmute: store only removals (an audit trail); the state itself
    goes into a Compacted unfold."""
    return [e for e in events if isinstance(e, Removed)], [Compacted(state)]


DECIDER: Decider[Command, State, Event] = Decider(
    initial=(), evolve=evolve, decide=decide, unfold=unfold, is_origin=is_origin
)
CODEC: Codec[Event] = Codec(Added, Removed, Compacted)
