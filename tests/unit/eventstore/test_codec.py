"""Codec: case names, nested JSON round trips, unknown cases and misfit data."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.eventstore import Codec, EventDecodeError, UnknownEventCase
from app.eventstore.codec import _to_json, _walk
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
