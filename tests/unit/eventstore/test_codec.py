"""Codec: case names, nested JSON round trips, unknown cases and misfit data."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.eventstore import Codec, EventDecodeError, UnknownEventCase
from app.eventstore.model import EncodedEvent

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
