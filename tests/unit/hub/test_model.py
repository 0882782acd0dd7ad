"""Sequence numbers, drawer slots, the fence and the acknowledge table, without Cosmos."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from app.dataavailable import DataAvailable
from app.hub.model import (
    CabinetKey,
    DrawerState,
    Ledger,
    Placement,
    StoredEvent,
    acknowledge_drawer,
    allocate,
    release,
    renew,
    save_into_drawer,
)


def event(message_type: str = "mt", recipient: str = "actor", weight: int = 1024) -> DataAvailable:
    return DataAvailable(str(uuid.uuid4()), recipient, "timeseries", message_type, weight)


def drawer_ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"d{next(counter)}"


def test_allocate_fills_the_last_drawer_then_opens_new_ones() -> None:
    new_id = drawer_ids()
    ledger, first = allocate(
        Ledger("actor"),
        [event() for _ in range(3)],
        token="t1",
        capacity=4,
        now_s=0,
        lease_s=10,
        new_drawer_id=new_id,
    )
    assert [(p.drawer_id, p.new_drawer) for p in first.placements] == [("d0", True)]
    released = release(ledger, "t1")
    assert released is not None
    ledger, second = allocate(
        released,
        [event() for _ in range(3)],
        token="t2",
        capacity=4,
        now_s=0,
        lease_s=10,
        new_drawer_id=new_id,
    )
    assert [(p.drawer_id, p.ordinal, len(p.events), p.new_drawer) for p in second.placements] == [
        ("d0", 0, 1, False),
        ("d1", 1, 2, True),
    ]
    assert [s.seq for p in second.placements for s in p.events] == [4, 5, 6]


def test_fence_stays_below_every_pending_claim_and_advances_on_release() -> None:
    ledger, first = allocate(
        Ledger("r"), [event()] * 2, token="a", capacity=10, now_s=0, lease_s=10, new_drawer_id=drawer_ids()
    )
    ledger, b = allocate(
        ledger, [event()] * 3, token="b", capacity=10, now_s=0, lease_s=10, new_drawer_id=drawer_ids()
    )
    assert ledger.fence == 0
    after_b = release(ledger, "b")
    assert after_b is not None and after_b.fence == first.first_seq - 1  # a (seqs 1-2) still pending
    after_both = release(after_b, "a")
    assert after_both is not None and after_both.fence == b.last_seq == 5


def test_expired_claim_is_voided_and_its_release_refused() -> None:
    ledger, claim = allocate(
        Ledger("r"), [event()] * 2, token="a", capacity=10, now_s=0, lease_s=5, new_drawer_id=drawer_ids()
    )
    reaped = ledger.reap(now_s=6)
    assert reaped.claims == () and reaped.fence == claim.last_seq
    assert all(reaped.is_void(s) for s in range(claim.first_seq, claim.last_seq + 1))
    assert release(reaped, "a") is None


def test_a_renewed_claim_outlives_its_first_lease_and_only_its_own_is_extended() -> None:
    ledger, _ = allocate(
        Ledger("r"), [event()] * 2, token="a", capacity=10, now_s=0, lease_s=5, new_drawer_id=drawer_ids()
    )
    ledger, _ = allocate(
        ledger, [event()], token="b", capacity=10, now_s=0, lease_s=5, new_drawer_id=drawer_ids()
    )
    renewed = renew(ledger, "a", until_s=11)
    assert renewed is not None
    assert {c.token: c.lease_until_s for c in renewed.claims} == {"a": 11, "b": 5}
    later = renewed.reap(now_s=6)
    assert [c.token for c in later.claims] == ["a"] and later.is_void(3) and not later.is_void(1)
    assert renew(renewed, "a", until_s=8) == renewed  # never shortened
    assert renew(later, "b", until_s=20) is None  # voided: nothing to renew
    released = release(later, "a")
    assert released is not None and renew(released, "a", until_s=20) is None


@given(
    st.lists(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=30), min_size=1, max_size=6),
    st.integers(min_value=1, max_value=7),
)
def test_per_cabinet_drawer_order_is_sequence_order(saves: list[list[str]], capacity: int) -> None:
    ledger = Ledger("r")
    new_id = drawer_ids()
    placed: dict[str, list[tuple[int, int]]] = {}  # cabinet -> (ordinal, seq)
    per_drawer: dict[str, int] = {}
    seqs: list[int] = []
    for n, kinds in enumerate(saves):
        ledger, allocation = allocate(
            ledger,
            [event(k) for k in kinds],
            token=str(n),
            capacity=capacity,
            now_s=0,
            lease_s=10,
            new_drawer_id=new_id,
        )
        for p in allocation.placements:
            per_drawer[p.drawer_id] = per_drawer.get(p.drawer_id, 0) + len(p.events)
            placed.setdefault(p.cabinet.message_type, []).extend((p.ordinal, s.seq) for s in p.events)
        seqs.extend(sorted(s.seq for p in allocation.placements for s in p.events))
        released = release(ledger, str(n))
        assert released is not None
        ledger = released
    assert seqs == list(range(1, len(seqs) + 1))
    assert all(count <= capacity for count in per_drawer.values())
    for pairs in placed.values():
        assert sorted(pairs) == sorted(pairs, key=lambda p: p[1])  # ordinal order == sequence order


def _placement(drawer: DrawerState, seqs: list[int]) -> Placement:
    events = tuple(StoredEvent(event(), s, drawer.drawer_id) for s in seqs)
    return Placement(drawer.cabinet, drawer.drawer_id, drawer.ordinal, False, events)


CAB = CabinetKey("r", "timeseries", "mt")


def test_save_adds_a_catalog_entry_only_when_the_drawer_had_no_unacknowledged_events() -> None:
    empty = DrawerState("d", CAB, 0)
    first, seq = save_into_drawer(empty, _placement(empty, [1, 2]))
    assert seq == 1 and first.unacked_from == 1
    second, seq = save_into_drawer(first, _placement(first, [5]))
    assert seq is None and second.unacked_from == 1 and second.last_seq == 5


# The seed's acknowledge table; "empty" = the drawer has no unacknowledged events left.
def test_table_row_not_empty_after_peek_not_empty_at_dequeue_points_at_next_item() -> None:
    drawer = DrawerState("d", CAB, 0, last_seq=10, unacked_from=1, used=10)
    acked = acknowledge_drawer(drawer, bundle_last_seq=4, next_seq_seen_at_peek=5, next_seq_now=None)
    assert acked.ack_seq == 4 and acked.unacked_from == 5


def test_table_row_empty_after_peek_and_at_dequeue_adds_no_entry() -> None:
    drawer = DrawerState("d", CAB, 0, last_seq=4, unacked_from=1, used=4)
    acked = acknowledge_drawer(drawer, bundle_last_seq=4, next_seq_seen_at_peek=None, next_seq_now=None)
    assert acked.ack_seq == 4 and acked.unacked_from is None


def test_table_row_empty_after_peek_new_events_since_points_at_them() -> None:
    drawer = DrawerState("d", CAB, 0, last_seq=9, unacked_from=1, used=6)
    acked = acknowledge_drawer(drawer, bundle_last_seq=4, next_seq_seen_at_peek=None, next_seq_now=7)
    assert acked.ack_seq == 4 and acked.unacked_from == 7


def test_table_impossible_row_events_left_at_peek_never_vanish_at_dequeue() -> None:
    # Whatever happens in between, leftovers seen by the peek keep the drawer non-empty.
    drawer = DrawerState("d", CAB, 0, last_seq=12, unacked_from=1, used=12)
    acked = acknowledge_drawer(drawer, bundle_last_seq=4, next_seq_seen_at_peek=5, next_seq_now=11)
    assert acked.unacked_from == 5


def test_acknowledge_is_idempotent_and_never_moves_back() -> None:
    drawer = DrawerState("d", CAB, 0, last_seq=10, ack_seq=6, unacked_from=7, used=10)
    acked = acknowledge_drawer(drawer, bundle_last_seq=4, next_seq_seen_at_peek=5, next_seq_now=None)
    assert acked.ack_seq == 6 and acked.unacked_from == 7


def test_reconcile_catalog_finds_the_true_first_event_and_stale_or_missing_entries() -> None:
    from app.hub.model import CatalogEntry, reconcile_catalog

    a = DrawerState("a", CAB, 0, last_seq=10, ack_seq=4, unacked_from=5, used=5)
    b = DrawerState("b", CAB, 1, last_seq=20, unacked_from=11, used=3)
    stale = CatalogEntry(CAB, "a", 1)  # left by the dequeue that acknowledged 1-4
    gone = CatalogEntry(CAB, "x", 2)  # its drawer was drained and removed
    live = CatalogEntry(CAB, "b", 11)
    first, to_delete, to_add = reconcile_catalog([stale, gone, live], [a, b])
    assert first == 5
    assert to_delete == [stale, gone]
    assert to_add == [CatalogEntry(CAB, "a", 5)]
    assert reconcile_catalog([stale], []) == (None, [stale], [])


def test_reconcile_catalog_takes_the_first_event_from_the_drawers_with_deferred_positions() -> None:
    from app.hub.model import CatalogEntry, reconcile_catalog

    stored = DrawerState("a", CAB, 0, last_seq=10, unacked_from=1, used=10)
    deferred = DrawerState("a", CAB, 0, last_seq=10, ack_seq=6, unacked_from=7, used=10, acked=6)
    entry = CatalogEntry(CAB, "a", 1)  # the entry stays where the stored drawer points
    first, to_delete, to_add = reconcile_catalog([entry], [stored], [deferred])
    assert (first, to_delete, to_add) == (7, [], [])
