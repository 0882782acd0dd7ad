"""RQ copies fed into a newer RQ storage topic after a shard change are judged where their group's
owner wrote them. Before, a fed copy was judged where it was read: the first one consumed put the
group's consumed position past every copy its state recorded, so the group's later MQ messages were
delivered ahead of its other fed copies, and copies fed twice (the feeder cut, restarted from its
committed offsets) were delivered again after them."""

from __future__ import annotations

from app.ordered.policy import OnDlq
from app.ordered.records import InternalMeta
from app.ordered.rules import (
    Action,
    GroupState,
    MessageState,
    decide_main,
    decide_retry,
    on_delivered,
    on_sidelined,
)
from app.ordered.work import RecordStub, Work
from app.subscription.orphans import FED_HEADER, fed_headers, fed_place

OLD, NEW = 0, 1  # RQ storage topic indexes: before and after change-shards
BLOCK = OnDlq.BLOCK_GROUP


def test_a_fed_copy_keeps_the_place_it_was_first_fed_from() -> None:
    once = fed_headers([("user", b"x")], (OLD, 7))
    assert fed_place(list(once.items())) == (OLD, 7)
    assert fed_headers(list(once.items()), (NEW, 3))[FED_HEADER] == b"0:7"  # fed again: kept
    assert once["user"] == b"x"


def test_a_copy_not_fed_or_fed_without_a_place_is_judged_where_it_is_read() -> None:
    assert fed_place([("user", b"x")]) is None
    assert fed_place([(FED_HEADER, b"1")]) is None  # an older version's mark


def item(main: int, fed_from: tuple[int, int] | None, offset: int) -> Work:
    meta = InternalMeta((0, main), 0, f"0-0-{main}", 1, 0)
    return Work(RecordStub("rq.1", 0, offset), 0, "g", meta, storage_idx=NEW, read_at=fed_from)


def test_the_rules_read_a_fed_copy_at_its_owners_place() -> None:
    assert item(3, (OLD, 9), offset=2).read == MessageState.at((0, 3), (OLD, 9))
    assert item(3, None, offset=2).read == MessageState.at((0, 3), (NEW, 2))


def owner_state() -> GroupState:
    """A group whose head (main 0) failed; its followers 1 and 2 were sidelined behind it, at old
    RQ offsets 10, 11, 12."""
    state = on_sidelined(None, (0, 0), MessageState.at((0, 0), (OLD, 10)), failed=True)
    state = on_sidelined(state, (0, 1), MessageState.at((0, 1), (OLD, 11)), failed=False)
    return on_sidelined(state, (0, 2), MessageState.at((0, 2), (OLD, 12)), failed=False)


def delivered(state: GroupState, main: int, at: tuple[int, int]) -> GroupState:
    new = on_delivered(state, (0, main), MessageState.at((0, main), at))
    assert new is not None
    return new


def test_judged_where_it_is_read_the_first_fed_copy_let_later_messages_pass() -> None:
    """The old behaviour, for contrast: read at its new place, the head's copy moves the group's
    consumed position past every copy it recorded, and main 5 goes ahead of copies 1 and 2."""
    state = delivered(owner_state(), 0, (NEW, 0))
    assert decide_main(state, (0, 5), BLOCK) is Action.DELIVER


def test_later_messages_wait_until_the_last_fed_copy_is_read() -> None:
    state = owner_state()
    for main, old in ((0, 10), (1, 11)):
        assert decide_retry(state, (0, main), (OLD, old), BLOCK) is Action.DELIVER
        state = delivered(state, main, (OLD, old))
        assert decide_main(state, (0, 5), BLOCK) is Action.SIDELINE  # copy 2 is still to come
    state = delivered(state, 2, (OLD, 12))
    assert decide_main(state, (0, 5), BLOCK) is Action.DELIVER


def test_a_copy_fed_twice_is_skipped_when_it_comes_again() -> None:
    state = owner_state()
    for main, old in ((0, 10), (1, 11), (2, 12)):
        state = delivered(state, main, (OLD, old))
    # The feeder was cut after feeding 10 and 11 and fed them again: their second copies are
    # further on in the new RQ, but their owner's places are behind what the group has read.
    assert decide_retry(state, (0, 0), (OLD, 10), BLOCK) is Action.SKIP
    assert decide_retry(state, (0, 1), (OLD, 11), BLOCK) is Action.SKIP
