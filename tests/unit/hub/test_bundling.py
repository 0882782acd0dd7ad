"""Bundle formation: weights up to 50 MB, non-bundleable events alone, per-drawer slices."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from app.dataavailable import MAX_WEIGHT_BYTES, DataAvailable
from app.hub.bundling import BundleBuilder
from app.hub.model import CabinetKey, DrawerState, StoredEvent

MB = 1024 * 1024


def stored(seq: int, weight: int = 1024, bundleable: bool = True, drawer: str = "d0") -> StoredEvent:
    event = DataAvailable(str(uuid.uuid4()), "r", "timeseries", "mt", weight, bundleable)
    return StoredEvent(event, seq, drawer)


def offer_all(builder: BundleBuilder, events: list[StoredEvent]) -> list[StoredEvent]:
    for e in events:
        if not builder.offer(e):
            break
    return builder.events


def test_weights_sum_up_to_the_limit_and_no_further() -> None:
    events = [stored(i, 20 * MB) for i in range(1, 5)]
    taken = offer_all(BundleBuilder(), events)
    assert [e.seq for e in taken] == [1, 2]  # a third 20 MB event would pass 50 MB


def test_non_bundleable_event_travels_alone_first_or_after_others() -> None:
    alone = offer_all(BundleBuilder(), [stored(1, bundleable=False), stored(2)])
    assert [e.seq for e in alone] == [1]
    before = offer_all(BundleBuilder(), [stored(1), stored(2), stored(3, bundleable=False)])
    assert [e.seq for e in before] == [1, 2]


def test_event_count_cap() -> None:
    taken = offer_all(BundleBuilder(max_events=3), [stored(i, 1) for i in range(1, 10)])
    assert len(taken) == 3


def test_slices_per_drawer_with_what_the_peek_saw_next() -> None:
    builder = BundleBuilder()
    for e in [stored(1, drawer="a"), stored(2, drawer="a"), stored(5, drawer="b")]:
        builder.offer(e)
    cabinet = CabinetKey("r", "d", "mt")
    seen = {"a": (DrawerState("a", cabinet, 0), "etag-a"), "b": (DrawerState("b", cabinet, 1), "etag-b")}
    slices = builder.slices({"b": 6}, seen)
    assert [
        (s.drawer_id, s.seen.ordinal, s.first_seq, s.last_seq, s.next_seq, s.count, s.etag) for s in slices
    ] == [
        ("a", 0, 1, 2, None, 2, "etag-a"),
        ("b", 1, 5, 5, 6, 1, "etag-b"),
    ]


@given(st.lists(st.tuples(st.integers(1, 30 * MB), st.booleans()), min_size=1, max_size=40))
def test_bundle_invariants(specs: list[tuple[int, bool]]) -> None:
    events = [stored(i + 1, w, b) for i, (w, b) in enumerate(specs)]
    taken = offer_all(BundleBuilder(), events)
    assert taken == events[: len(taken)]  # a prefix, in order
    assert len(taken) >= 1
    assert sum(e.event.weight for e in taken) <= MAX_WEIGHT_BYTES
    if any(not e.event.bundleable for e in taken):
        assert len(taken) == 1
    if len(taken) < len(events):  # stopped for a reason
        nxt = events[len(taken)]
        total = sum(e.event.weight for e in taken)
        assert (
            not nxt.event.bundleable
            or not taken[0].event.bundleable
            or total + nxt.event.weight > MAX_WEIGHT_BYTES
        )
