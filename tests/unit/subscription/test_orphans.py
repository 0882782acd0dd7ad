"""Adopting RQ/DLQ copies a group's state lacks (written before a crash): each is recorded as the
lost state write would have recorded it, a copy the state knows changes nothing, and only this
incarnation's own copies (not fed ones) are taken."""

from __future__ import annotations

from app.ordered.orphans import Copy, adopt
from app.ordered.policy import OnDlq
from app.ordered.records import FailureInfo, InternalMeta, encode_internal
from app.ordered.rules import (
    Action,
    GroupState,
    MessageState,
    decide_main,
    decide_retry,
    on_dead_lettered,
    on_sidelined,
)
from app.subscription.orphans import FED_HEADER, INCARNATION_HEADER, copy_of

FAILURE = FailureInfo("EndpointUnavailable", "503", "t[0]@1", 0, "failed")


def copy(queue: str, main: int, at: int, *, failed: bool = True) -> Copy:
    meta = InternalMeta((0, main), 0, f"0-0-{main}", 1, 0, failure=FAILURE if failed else None)
    return Copy(queue, "g", meta, MessageState.at((0, main), (0, at)))  # type: ignore[arg-type]


def test_a_lost_retry_copy_is_recorded_as_the_sideline_would_have_been() -> None:
    adopted = adopt(None, copy("rq", main=1, at=0), generation=0)
    assert adopted == on_sidelined(None, (0, 1), MessageState.at((0, 1), (0, 0)), failed=True)
    # The MQ replay of the message is skipped, its followers queue behind the copy ...
    assert decide_main(adopted, (0, 1), OnDlq.BLOCK_GROUP) is Action.SKIP
    assert decide_main(adopted, (0, 2), OnDlq.BLOCK_GROUP) is Action.SIDELINE
    # ... and the copy itself is delivered when it comes out of RQ.
    assert decide_retry(adopted, (0, 1), (0, 0), OnDlq.BLOCK_GROUP) is Action.DELIVER


def test_a_copy_the_state_knows_changes_nothing() -> None:
    known = on_sidelined(None, (0, 1), MessageState.at((0, 1), (0, 4)), failed=True)
    assert adopt(known, copy("rq", main=1, at=4), 0) is None
    assert adopt(known, copy("rq", main=1, at=3), 0) is None
    dead = on_dead_lettered(None, (0, 1), MessageState.at((0, 1), (0, 2)))
    assert adopt(dead, copy("dlq", main=1, at=2), 0) is None


def test_a_lost_dlq_copy_blocks_the_group_and_its_replay_is_skipped() -> None:
    adopted = adopt(GroupState(), copy("dlq", main=3, at=0), generation=0)
    assert adopted is not None and adopted.dlq.pending
    assert decide_main(adopted, (0, 3), OnDlq.BLOCK_GROUP) is Action.SKIP
    assert decide_main(adopted, (0, 4), OnDlq.BLOCK_GROUP) is Action.FOLLOW_TO_DLQ


def test_a_sidelined_follower_is_not_a_failed_head() -> None:
    adopted = adopt(None, copy("rq", main=2, at=0, failed=False), 0)
    assert adopted is not None and adopted.retry_head is None and adopted.rq.pending


def test_only_this_incarnations_own_copies_are_taken() -> None:
    meta = InternalMeta((0, 1), 0, "0-0-1", 1, 0, failure=FAILURE)
    headers = encode_internal(meta, None)
    mine = [*headers, (INCARNATION_HEADER, b"abc")]
    found = copy_of("rq", b"g", mine, (0, 7), "abc", 255)
    assert found is not None and found.at == MessageState.at((0, 1), (0, 7)) and found.group_id == "g"
    assert copy_of("rq", b"g", [*headers, (INCARNATION_HEADER, b"old")], (0, 7), "abc", 255) is None
    assert copy_of("rq", b"g", headers, (0, 7), "abc", 255) is None
    assert copy_of("rq", b"g", [*mine, (FED_HEADER, b"1")], (0, 7), "abc", 255) is None
    assert copy_of("rq", None, mine, (0, 7), "abc", 255) is None  # undecodable: the runner's DLQ path


def test_a_failed_copy_proves_the_copies_before_it_were_read() -> None:
    """0 failed, its copy was delivered, 1 went straight, 2 failed: all state writes lost. The
    copy of 2 (a delivery attempt) proves the copy of 0 was read: it is not delivered again after
    1 (the MQ replay of 1 is skipped, its copy marks 2 handled)."""
    first = adopt(None, copy("rq", main=0, at=0), 0)
    both = adopt(first, copy("rq", main=2, at=1), 0, [MessageState.at((0, 0), (0, 0))])
    assert both is not None
    assert decide_retry(both, (0, 0), (0, 0), OnDlq.SKIP_FAILED) is Action.SKIP
    assert decide_retry(both, (0, 2), (0, 1), OnDlq.SKIP_FAILED) is Action.DELIVER
    # A copy sidelined behind a pending one proves nothing about it.
    follower = adopt(first, copy("rq", main=2, at=1, failed=False), 0, [MessageState.at((0, 0), (0, 0))])
    assert (
        follower is not None and decide_retry(follower, (0, 0), (0, 0), OnDlq.SKIP_FAILED) is Action.DELIVER
    )
