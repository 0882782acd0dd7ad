"""Stored group states that do not decode: a position holding a null (what a copy delivered
without an offset left, before `PlaceUnknown`), a field missing, not JSON at all. Each raises the
typed UndecodableState, which readers take as a write that never landed; before, `from_json`
raised a TypeError out of the shard's start, every second, for ever."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.ordered.errors import UndecodableState
from app.ordered.rules import GroupState, MessageState, QueueState, state_of_record

GOOD = GroupState(rq=QueueState(MessageState(0, 5, 0, 3), MessageState(0, 4, 0, 2)), handled=(0, 5))


def test_a_state_round_trips_through_its_record() -> None:
    assert state_of_record(orjson.dumps({"e": 1, "s": GOOD.to_json()})) == GOOD


@pytest.mark.parametrize(
    "raw",
    [
        orjson.dumps({"e": 1, "s": {**GOOD.to_json(), "rq": {"p": [0, 5, 0, None], "c": None}}}),
        orjson.dumps({"e": 1, "s": {**GOOD.to_json(), "handled": [0, None]}}),
        orjson.dumps({"e": 1, "s": {"dlq": {"p": None, "c": None}}}),
        orjson.dumps({"e": 1, "s": {**GOOD.to_json(), "rq": {"p": [0, 5], "c": None}}}),
        orjson.dumps({"e": 1}),
        orjson.dumps([1, 2]),
        b"\xff not json",
    ],
    ids=[
        "null-rq-offset",
        "null-handled",
        "no-rq",
        "short-position",
        "no-state",
        "not-an-object",
        "not-json",
    ],
)
def test_a_record_that_does_not_decode_raises_the_typed_error(raw: bytes) -> None:
    with pytest.raises(UndecodableState, match="does not decode"):
        state_of_record(raw)


_json = st.recursive(
    st.none() | st.integers(-3, 3) | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["rq", "dlq", "p", "c", "s"]), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(_json)
def test_any_json_decodes_or_raises_the_typed_error(data: object) -> None:
    """No other exception escapes; what decodes is a state that round-trips."""
    try:
        state = state_of_record(orjson.dumps({"e": 0, "s": data}))
    except UndecodableState:
        return
    assert state_of_record(orjson.dumps({"s": state.to_json()})) == state
