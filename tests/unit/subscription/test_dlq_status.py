"""A dead letter's status from its group's state: parked until the DLQ consumed mark reaches it,
then replayed (unsideline) or discarded (a DLQ fast-forward), and which entries a fast-forward
gives up (pure)."""

from __future__ import annotations

from app.ordered.policy import OnDlq
from app.ordered.rules import (
    DlqStatus,
    GroupState,
    MessageState,
    QueueState,
    dlq_status,
    is_blocked,
    on_dead_lettered,
    on_dlq_discarded,
    on_unsidelined,
)
from app.subscription.replay import DlqEntry, select_discards


def _dead(n: int) -> GroupState:
    """A group with dead letters at DLQ (0, 0) .. (0, n-1), main offsets 10, 11, ..."""
    state: GroupState | None = None
    for i in range(n):
        state = on_dead_lettered(state, (0, 10 + i), MessageState.at((0, 10 + i), (0, i)))
    assert state is not None
    return state


def _statuses(state: GroupState | None, n: int) -> list[str]:
    return [dlq_status(state, (0, i)).value for i in range(n)]


def test_parked_until_the_mark_reaches_it() -> None:
    assert _statuses(None, 2) == ["parked", "parked"]
    assert _statuses(_dead(3), 3) == ["parked"] * 3


def test_unsidelined_show_replayed() -> None:
    state = on_unsidelined(_dead(3), MessageState.at((0, 11), (0, 1)), [MessageState.at((0, 10), (0, 0))])
    assert _statuses(state, 3) == ["replayed", "replayed", "parked"]


def test_fast_forward_discards_and_unblocks() -> None:
    state = _dead(3)
    assert is_blocked(state, OnDlq.BLOCK_GROUP)
    part = on_dlq_discarded(state, MessageState.at((0, 11), (0, 1)))
    assert _statuses(part, 3) == ["discarded", "discarded", "parked"]
    assert is_blocked(part, OnDlq.BLOCK_GROUP)
    done = on_dlq_discarded(part, MessageState.at((0, 12), (0, 2)))
    assert _statuses(done, 3) == ["discarded"] * 3
    assert done.dlq_discarded == ((None, (0, 2)),)  # two fast-forwards in a row: one range
    assert not is_blocked(done, OnDlq.BLOCK_GROUP)
    assert on_dlq_discarded(done, MessageState.at((0, 11), (0, 1))) == done  # behind the mark: nothing


def test_replayed_and_discarded_interleaved_survive_json() -> None:
    state = on_dlq_discarded(_dead(5), MessageState.at((0, 10), (0, 0)))
    state = on_unsidelined(state, MessageState.at((0, 12), (0, 2)), [])
    state = on_dlq_discarded(state, MessageState.at((0, 13), (0, 3)))
    want = ["discarded", "replayed", "replayed", "discarded", "parked"]
    assert _statuses(state, 5) == want
    again = GroupState.from_json(state.to_json())
    assert again == state and _statuses(again, 5) == want


def test_states_without_discards_keep_their_json() -> None:
    state = _dead(1)
    assert "dlq_discarded" not in state.to_json()
    assert GroupState.from_json(state.to_json()).dlq_discarded == ()


def test_a_later_storage_topic_is_past_the_mark() -> None:
    state = GroupState(dlq=QueueState(MessageState(0, 5, 1, 0), MessageState(0, 4, 0, 7)))
    assert dlq_status(state, (0, 7)) is DlqStatus.REPLAYED
    assert dlq_status(state, (1, 0)) is DlqStatus.PARKED


def _entry(group: str, offset: int, idx: int = 0) -> DlqEntry:
    return DlqEntry(group, f"m{idx}-{offset}", (0, 100 + offset), 0, (idx, offset), 0)


def test_discards_are_each_groups_unresolved_prefix_below_the_offsets() -> None:
    entries = [_entry("a", o) for o in (0, 2, 4)] + [_entry("b", o) for o in (1, 3)] + [_entry("c", 5)]
    resolved = {"b": on_unsidelined(GroupState(), MessageState.at((0, 101), (0, 1)), [])}
    got = select_discards(entries, resolved, lambda e: e.dlq[1] < 4)
    assert {g: [e.dlq for e in es] for g, es in got.items()} == {"a": [(0, 0), (0, 2)], "b": [(0, 3)]}


def test_discards_stop_at_the_first_entry_kept() -> None:
    # with a timestamp, an older storage topic's entry can be above its offset, a newer one below
    entries = [_entry("a", 0), _entry("a", 1), _entry("a", 0, idx=1)]
    got = select_discards(entries, {}, lambda e: e.dlq != (0, 1))
    assert [e.dlq for e in got["a"]] == [(0, 0)]
