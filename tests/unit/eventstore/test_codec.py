"""Codec: case names, nested JSON round trips, unknown cases and misfit data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.eventstore import (
    Cache,
    Codec,
    EventDecodeError,
    EventStore,
    MemoryStreamStorage,
    StoreOptions,
    UnknownEventCase,
    Unoptimized,
)
from app.eventstore.codec import _to_json, _walk
from app.eventstore.model import EncodedEvent

from . import favorites as fav
from .favorites import CODEC, Added, Compacted, Item, Removed

items = st.builds(
    Item,
    id=st.integers(min_value=-(2**53), max_value=2**53),
    name=st.text(max_size=20),
    added=st.datetimes(timezones=st.just(UTC)),
)
events = st.one_of(
    st.builds(Added, items),
    st.builds(Removed, st.integers()),
    st.builds(Compacted, st.lists(items, max_size=5).map(tuple)),
)


@given(events)
def test_every_favorites_event_round_trips(event: Added | Removed | Compacted) -> None:
    encoded = CODEC.encode(event)
    assert encoded.case == type(event).__name__
    assert CODEC.decode(encoded) == event


def test_unknown_case_names_the_case_and_the_known_ones() -> None:
    with pytest.raises(UnknownEventCase, match=r"'Renamed'.*Added"):
        CODEC.decode(EncodedEvent("Renamed", {}))


def test_encoding_an_unregistered_type_is_refused() -> None:
    @dataclass(frozen=True)
    class Other:
        x: int

    with pytest.raises(UnknownEventCase, match="Other"):
        CODEC.encode(Other(1))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("case", "data", "where"),
    [
        ("Removed", {"item_id": "seven"}, "Removed.item_id"),
        ("Removed", {}, "missing field 'item_id'"),
        ("Added", {"item": {"id": 1, "name": "a", "added": "not a date"}}, "Added.item.added"),
        ("Compacted", {"items": {"id": 1}}, "Compacted.items"),
        ("Removed", [1], "object for Removed"),
        ("Removed", {"item_id": True}, "Removed.item_id"),
    ],
)
def test_data_that_does_not_fit_names_the_field(case: str, data: object, where: str) -> None:
    with pytest.raises(EventDecodeError, match=where.replace(".", r"\.").replace("(", r"\(")):
        CODEC.decode(EncodedEvent(case, data))


def test_case_classvar_overrides_the_class_name_and_duplicates_are_refused() -> None:
    @dataclass(frozen=True)
    class V2:
        case = "Thing"
        when: datetime | None = None

    codec: Codec[V2] = Codec(V2)
    assert codec.encode(V2()).case == "Thing"
    assert codec.decode(EncodedEvent("Thing", {"when": None})) == V2()
    with pytest.raises(TypeError, match="twice"):
        Codec(V2, V2)


@dataclass(frozen=True, slots=True)
class Shapes:
    """Every shape the codec encodes, including the ones orjson refuses (sets, huge integers)."""

    when: datetime
    naive: datetime
    numbers: tuple[int, ...]
    ratio: float
    tags: frozenset[str] | None
    extra: dict[str, int]
    nested: tuple[Item, ...]
    maybe: str | None


def _shapes(*, within_orjson: bool) -> st.SearchStrategy[Shapes]:
    bits = 63 if within_orjson else 70
    return st.builds(
        Shapes,
        when=st.datetimes(timezones=st.just(UTC)),
        naive=st.datetimes(),
        numbers=st.lists(st.integers(min_value=-(2**bits), max_value=2**bits - 1), max_size=4).map(tuple),
        ratio=st.floats(allow_nan=False, allow_infinity=False),
        tags=st.none() if within_orjson else st.frozensets(st.text(max_size=5), max_size=3),
        extra=st.dictionaries(
            st.text(max_size=5), st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=3
        ),
        nested=st.lists(items, max_size=3).map(tuple),
        maybe=st.none() | st.text(max_size=5),
    )


@given(st.one_of(_shapes(within_orjson=True), _shapes(within_orjson=False)))
def test_the_fast_encoding_is_the_python_walk(value: Shapes) -> None:
    """orjson encodes what it can, the walk the rest (sets, huge integers): the same JSON data."""
    assert _to_json(value) == _walk(value)


NOW = datetime(2024, 5, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Starred:
    """An event case of a newer version of the Favorites codec."""

    item_id: int


def evolve_newer(state: fav.State, event: fav.Event | Starred) -> fav.State:
    return state if isinstance(event, Starred) else fav.evolve(state, event)


def add_and_star(item_id: int) -> Callable[[fav.State], tuple[None, list[Any]]]:
    def decision(state: fav.State) -> tuple[None, list[Any]]:
        return None, [Added(Item(item_id, "n", NOW)), Starred(item_id)]

    return decision


async def test_a_codec_that_skips_unknown_cases_folds_past_a_newer_versions_events() -> None:
    """A stream written by a newer version (with an event case this codec does not know) loads with
    `skip_unknown` (Equinox's tryDecode), counting what it folded past; without it, the load fails."""
    storage = MemoryStreamStorage()
    newer: Codec[Any] = Codec(Added, Removed, Compacted, Starred)
    store = EventStore(storage, StoreOptions(max_events_in_tip=2))
    writer = store.category("F", replace(fav.DECIDER, evolve=evolve_newer), newer, Unoptimized())
    for i in range(3):
        await writer.decide("F-1", add_and_star(i))

    old: Codec[fav.Event] = Codec(Added, Removed, Compacted, skip_unknown=True)
    reader = store.category("F", fav.DECIDER, old, Unoptimized(), Cache())
    assert sorted(x.id for x in (await reader.load("F-1")).state) == [0, 1, 2]
    assert old.skipped == 3
    assert [e.item.id for _, e in await reader.read_events("F-1") if isinstance(e, Added)] == [0, 1, 2]
    await reader.transact("F-1", fav.Add(9, "m", NOW))  # writes on, carrying the unknown ones as stored
    assert sorted(x.id for x in (await writer.load("F-1")).state) == [0, 1, 2, 9]

    strict = store.category("F", fav.DECIDER, CODEC, Unoptimized())
    with pytest.raises(UnknownEventCase):
        await strict.load("F-1")
