"""Which DLQ messages an unsideline replays: unresolved only, group order, no out-of-order picks."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from app.cli.subscription import subscription
from app.ordered.rules import GroupState, MessageState, on_dead_lettered
from app.subscription.errors import InvalidSubscription
from app.subscription.replay import DlqEntry, ReplaySelection, select_replays


def entry(group: str, n: int, failed_ms: int = 1000) -> DlqEntry:
    return DlqEntry(group, f"{group}-{n}", (0, 10 * n), 0, (0, n), failed_ms + n)


def dead(group_entries: list[DlqEntry]) -> GroupState:
    state = None
    for e in group_entries:
        state = on_dead_lettered(state, e.main, MessageState.at(e.main, e.dlq))
    assert state is not None
    return state


def test_all_unresolved_in_group_order() -> None:
    a = [entry("a", n) for n in (0, 2, 4)]
    b = [entry("b", n) for n in (1, 3)]
    shuffled = [b[1], a[2], a[0], b[0], a[1]]
    plan = select_replays(shuffled, {"a": dead(a), "b": dead(b)}, ReplaySelection())
    assert plan == {"a": a, "b": b}


def test_already_replayed_entries_are_not_replayed_again() -> None:
    a = [entry("a", n) for n in range(4)]
    state = dead(a)
    # entries 0 and 1 were replayed: the DLQ consumption mark is at entry 1
    state = GroupState(rq=state.rq, dlq=state.dlq.consumed(MessageState.at(a[1].main, a[1].dlq)))
    assert select_replays(a, {"a": state}, ReplaySelection()) == {"a": a[2:]}
    assert select_replays(a[:2], {"a": state}, ReplaySelection()) == {}


def test_selection_by_group_message_id_and_time() -> None:
    a = [entry("a", n) for n in range(3)]
    b = [entry("b", n) for n in range(3)]
    states = {"a": dead(a), "b": dead(b)}
    assert select_replays(a + b, states, ReplaySelection(group_id="b")) == {"b": b}
    assert select_replays(a + b, states, ReplaySelection(message_id="a-0")) == {"a": a[:1]}
    assert select_replays(a + b, states, ReplaySelection(until_ms=1001)) == {"a": a[:2], "b": b[:2]}


def test_leaving_out_an_earlier_unresolved_message_is_refused() -> None:
    a = [entry("a", n) for n in range(3)]
    with pytest.raises(InvalidSubscription, match="a-0"):
        select_replays(a, {"a": dead(a)}, ReplaySelection(message_id="a-1"))
    with pytest.raises(InvalidSubscription, match="out of group order"):
        select_replays(a, {"a": dead(a)}, ReplaySelection(since_ms=1001))


def test_cli_unsideline_needs_a_selection() -> None:
    result = CliRunner().invoke(subscription, ["dlq", "unsideline", "s1"])
    assert result.exit_code == 2
    assert "--all" in result.output
