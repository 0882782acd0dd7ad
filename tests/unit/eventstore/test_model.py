"""Document layout: round trips, corrupt bodies, compressed unfolds, calving plans."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.eventstore import CorruptStream, InvalidStreamName
from app.eventstore.model import (
    TIP_ID,
    AppendPlan,
    EncodedEvent,
    EncodedUnfold,
    TipDocument,
    check_stream_name,
    parse_batch,
    parse_tip,
    plan_append,
    plan_unfold_only,
)


def ev(n: int) -> EncodedEvent:
    return EncodedEvent("Added", {"n": n}, None, "2024-01-01T00:00:00.000Z")


def test_tip_round_trips_with_the_issue_field_names() -> None:
    tip = TipDocument(
        "s-1", 4, (ev(4),), (EncodedUnfold(5, EncodedEvent("Compacted", {"x": 1}, {"k": "v"}, "t")),)
    )
    body = tip.to_json(compress_min_bytes=10_000)
    assert body["id"] == TIP_ID and body["p"] == "s-1" and body["i"] == 4 and body["n"] == 5
    assert body["e"] == [{"c": "Added", "d": {"n": 4}, "m": None, "t": "2024-01-01T00:00:00.000Z"}]
    assert "z" not in body["u"][0]
    assert parse_tip({**body, "_etag": "abc"}, "s-1") == TipDocument(
        tip.stream, tip.index, tip.events, tip.unfolds, "abc"
    )


def test_large_unfolds_are_compressed_and_flagged() -> None:
    data = {"items": ["x" * 50] * 40}
    tip = TipDocument("s", 0, (), (EncodedUnfold(0, EncodedEvent("Compacted", data, None, "t")),))
    body = tip.to_json(compress_min_bytes=256)
    assert body["u"][0]["z"] == 1 and isinstance(body["u"][0]["d"], str)
    assert len(body["u"][0]["d"]) < len(str(data))
    assert parse_tip(body, "s").unfolds[0].event.data == data


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("not json object", "must be a JSON object"),
        ({"p": "other", "i": 0, "n": 0, "e": []}, "belongs to stream"),
        ({"p": "s", "i": 0, "n": 2, "e": [{"c": "A", "d": 1}]}, "'n'=2"),
        ({"p": "s", "i": -1, "n": 0, "e": []}, "non-negative"),
        ({"p": "s", "i": 0, "n": 1, "e": [{"d": 1}]}, "case 'c'"),
        ({"p": "s", "i": 0, "n": 1, "e": [{"c": "A"}]}, "no data"),
        ({"p": "s", "i": 0, "n": 0, "e": "x"}, "'e' must be a list"),
        (
            {"p": "s", "i": 0, "n": 0, "e": [], "u": [{"i": 0, "c": "C", "d": "!!", "z": 1}]},
            "does not decode",
        ),
    ],
)
def test_corrupt_tip_bodies_raise_corrupt_stream_naming_the_problem(body: object, reason: str) -> None:
    with pytest.raises(CorruptStream, match="stream 's'") as caught:
        parse_tip(body, "s")
    assert reason in str(caught.value)


def test_batch_id_must_equal_its_base_index() -> None:
    with pytest.raises(CorruptStream, match="base index"):
        parse_batch({"p": "s", "id": "7", "i": 3, "n": 3, "e": []}, "s")


@pytest.mark.parametrize("name", ["", "a\nb", "x" * 1025])
def test_bad_stream_names_are_rejected(name: str) -> None:
    with pytest.raises(InvalidStreamName):
        check_stream_name(name)


@given(
    writes=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=40),
    max_events=st.integers(min_value=1, max_value=12),
)
def test_calved_batches_tile_the_stream_and_keep_every_event_once(writes: list[int], max_events: int) -> None:
    tip: TipDocument | None = None
    batches = {}
    appended: list[EncodedEvent] = []
    for count in writes:
        new = [ev(len(appended) + k) for k in range(count)]
        appended.extend(new)
        plan = plan_append("s", tip, new, (), max_events=max_events, max_json_bytes=10_000_000)
        if plan.calved is not None:
            assert tip is not None and plan.calved.index == tip.index and plan.calved.events == tip.events
            batches[plan.calved.index] = plan.calved
        tip = plan.tip
        assert len(tip.events) <= max(max_events, count)
    assert tip is not None
    stored: list[EncodedEvent] = []
    position = 0
    for index in sorted(batches):
        assert index == position
        stored.extend(batches[index].events)
        position = batches[index].next_index
    assert position == tip.index
    stored.extend(tip.events)
    assert stored == appended
    assert tip.next_index == len(appended)


def test_tip_calves_on_json_size_as_well_as_event_count() -> None:
    tip = TipDocument("s", 0, (ev(0), ev(1)), (), "e")
    plan = plan_append("s", tip, [ev(2)], (), max_events=100, max_json_bytes=100)
    assert plan.calved is not None and plan.calved.events == tip.events
    assert plan.tip.index == 2 and plan.tip.events == (ev(2),)


def unfold(case: str, index: int) -> EncodedUnfold:
    return EncodedUnfold(index, EncodedEvent(case, {"at": index}))


def cases(tip: TipDocument) -> list[tuple[str, int]]:
    return [(u.event.case, u.index) for u in tip.unfolds]


def append_fifth_event(max_events: int) -> AppendPlan:
    """A tip of 4 events with a Snapshot and a Summary unfolded at version 3, then one more event
    written with a new Snapshot."""
    events = tuple(EncodedEvent("Added", {"n": i}) for i in range(4))
    tip = TipDocument("s-1", 0, events, (unfold("Snapshot", 3), unfold("Summary", 3)))
    fifth = [EncodedEvent("Added", {"n": 4})]
    return plan_append(
        "s-1", tip, fifth, [unfold("Snapshot", 5)], max_events=max_events, max_json_bytes=10**6
    )


def test_new_unfolds_supersede_stored_ones_of_their_case_only() -> None:
    """The Equinox design: `u` holds unfolded events which supersede items with equivalent case values.
    Before, each write replaced the whole list: another writer's projection was lost."""
    plan = append_fifth_event(max_events=10)
    assert plan.calved is None
    assert cases(plan.tip) == [("Summary", 3), ("Snapshot", 5)]
    rolled = plan_unfold_only("s-1", plan.tip, [unfold("Summary", 6)])
    assert cases(rolled) == [("Snapshot", 5), ("Summary", 6)]


def test_unfolds_of_other_cases_go_when_the_tip_moves_past_their_event() -> None:
    plan = append_fifth_event(max_events=4)
    assert plan.calved is not None and plan.tip.index == 4
    assert cases(plan.tip) == [("Snapshot", 5)], "Summary@3 is behind the new tip's base 4"
