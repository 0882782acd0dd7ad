"""GroupState rules: unit cases and property tests over a one-shard model (tests/unit/subscription/sim.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.ordered.policy import OnDlq, RetryPolicy
from app.ordered.rules import (
    Action,
    GroupState,
    MessageState,
    Position,
    decide_main,
    decide_retry,
    on_dead_lettered,
    on_delivered,
    on_sidelined,
    settled,
)
from tests.unit.subscription.sim import FATAL, OK, RETRY, Shard

GROUPS = ["a", "b", "c", "d"]


def test_clean_group_keeps_no_state() -> None:
    assert decide_main(None, (0, 5), OnDlq.BLOCK_GROUP) is Action.DELIVER
    assert on_delivered(None, (0, 5)) is None


def test_failure_sidelines_later_messages_until_consumed() -> None:
    s = on_sidelined(None, (0, 1), MessageState(0, 1, 0, 7), failed=True)
    assert s.retry_head == (0, 1)
    assert decide_main(s, (0, 2), OnDlq.BLOCK_GROUP) is Action.SIDELINE
    s = on_sidelined(s, (0, 2), MessageState(0, 2, 0, 8), failed=False)
    # the failed head comes back and succeeds; the one behind it is then delivered
    assert decide_retry(s, (0, 1), (0, 7), OnDlq.BLOCK_GROUP) is Action.DELIVER
    s2 = on_delivered(s, (0, 1), MessageState(0, 1, 0, 7))
    assert s2 is not None and s2.retry_head is None and s2.rq.pending
    assert decide_retry(s2, (0, 2), (0, 8), OnDlq.BLOCK_GROUP) is Action.DELIVER
    s3 = on_delivered(s2, (0, 2), MessageState(0, 2, 0, 8))
    assert s3 is not None and not s3.rq.pending
    assert decide_main(s3, (0, 3), OnDlq.BLOCK_GROUP) is Action.DELIVER
    # a replay of an already handled MQ message after a crash is skipped
    assert decide_main(s3, (0, 2), OnDlq.BLOCK_GROUP) is Action.SKIP
    # the same replay after an MQ rewind (new generation) is delivered again
    assert decide_main(s3, (0, 2), OnDlq.BLOCK_GROUP, generation=1) is Action.DELIVER


def test_message_behind_a_failed_head_is_residelined() -> None:
    s = on_sidelined(None, (0, 1), MessageState(0, 1, 0, 0), failed=True)
    s = on_sidelined(s, (0, 2), MessageState(0, 2, 0, 1), failed=False)
    # head fails again and is written behind (0, 2)
    s = on_sidelined(s, (0, 1), MessageState(0, 1, 0, 2), failed=True, read_from_rq=MessageState(0, 1, 0, 0))
    assert decide_retry(s, (0, 2), (0, 1), OnDlq.BLOCK_GROUP) is Action.SIDELINE
    assert decide_retry(s, (0, 1), (0, 0), OnDlq.BLOCK_GROUP) is Action.SKIP  # already consumed copy


def test_a_retry_head_skipped_in_rq_stops_holding_its_group() -> None:
    """RQ fast-forwarded (or expired) past the failed head's copy: the first later copy read
    shows the head will never come, so it is delivered and the group runs freely again. Before,
    the head stayed in the state and every later message was sidelined again, forever."""
    s = on_sidelined(None, (0, 1), MessageState(0, 1, 0, 10), failed=True)
    s = on_sidelined(s, (0, 2), MessageState(0, 2, 0, 11), failed=False)
    assert s.retry_head == (0, 1) and s.retry_head_at == (0, 10)
    # RQ moved past offset 10: the copy at 11 is read next
    assert decide_retry(s, (0, 2), (0, 11), OnDlq.BLOCK_GROUP) is Action.DELIVER
    after = on_delivered(s, (0, 2), MessageState(0, 2, 0, 11))
    assert after is not None and after.retry_head is None and not after.rq.pending
    assert decide_main(after, (0, 3), OnDlq.BLOCK_GROUP) is Action.DELIVER


def test_a_head_sidelined_again_keeps_holding_its_group_until_its_newest_copy() -> None:
    s = on_sidelined(None, (0, 1), MessageState(0, 1, 0, 0), failed=True)
    s = on_sidelined(s, (0, 2), MessageState(0, 2, 0, 1), failed=False)
    s = on_sidelined(s, (0, 1), MessageState(0, 1, 0, 2), failed=True, read_from_rq=MessageState(0, 1, 0, 0))
    assert s.retry_head_at == (0, 2)
    # the head's newest copy comes later in RQ: the copy at 1 queues behind it again
    assert decide_retry(s, (0, 2), (0, 1), OnDlq.BLOCK_GROUP) is Action.SIDELINE


def test_dlq_blocks_or_skips_per_policy() -> None:
    s = on_dead_lettered(None, (0, 4), MessageState(0, 4, 0, 0))
    assert decide_main(s, (0, 5), OnDlq.BLOCK_GROUP) is Action.FOLLOW_TO_DLQ
    assert decide_main(s, (0, 5), OnDlq.SKIP_FAILED) is Action.DELIVER


def test_state_json_roundtrip() -> None:
    s = on_sidelined(None, (1, 3), MessageState(1, 3, 0, 9), failed=True)
    s = on_dead_lettered(s, (1, 4), MessageState(1, 4, 0, 2))
    assert GroupState.from_json(s.to_json()) == s


def test_backoff() -> None:
    lin = RetryPolicy(backoff="linear", min_backoff_s=2, max_backoff_s=5)  # type: ignore[arg-type]
    assert [lin.delay_s(n) for n in (1, 2, 3)] == [2, 4, 5]
    exp = RetryPolicy(min_backoff_s=1, max_backoff_s=5)
    assert [exp.delay_s(n) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]
    p = RetryPolicy()
    assert p.is_retriable(False, status=503) and p.is_retriable(False, status=429)
    assert not p.is_retriable(True, status=404)
    assert p.is_retriable(False, timed_out=True)


answers_st = st.lists(st.sampled_from([OK, OK, RETRY, FATAL]), max_size=4)
messages_st = st.lists(st.tuples(st.sampled_from(GROUPS), answers_st), min_size=1, max_size=40)
# A schedule: True = read the next MQ message, False = read the RQ head (when there is one).
schedule_st = st.lists(st.booleans(), max_size=120)


def _run(
    policy: OnDlq,
    messages: list[tuple[str, list[str]]],
    schedule: list[bool],
    replay_every: int,
    forget: bool = False,
) -> Shard:
    """`forget`: settled states are dropped after every read (and its replay), as after a commit."""
    mains = [(0, i) for i in range(len(messages))]
    shard = Shard(
        RetryPolicy(max_attempts=3), policy, {m: a for m, (_, a) in zip(mains, messages, strict=True)}
    )

    def after_read() -> None:
        if forget:
            shard.forget_settled()

    i = 0
    for read_mq in schedule:
        if read_mq and i < len(messages):
            shard.read_main(messages[i][0], mains[i])
            if replay_every and i % replay_every == 0:  # a crash replays an already handled message
                shard.read_main(messages[i][0], mains[i])
            i += 1
        elif shard.rq:
            shard.read_retry()
        after_read()
    while i < len(messages):
        shard.read_main(messages[i][0], mains[i])
        i += 1
        after_read()
    while shard.rq:
        shard.read_retry()
        after_read()
    return shard


def _check_order_and_completeness(
    shard: Shard, messages: list[tuple[str, list[str]]], allow_duplicates: bool
) -> None:
    produced = {g: [(0, i) for i, (mg, _) in enumerate(messages) if mg == g] for g in GROUPS}
    in_dlq = {main for _, main, _ in shard.dlq}
    for g in GROUPS:
        got = shard.delivered.get(g, [])
        # a crash replay may deliver a clean group's message again, but only right after itself
        assert got == sorted(got), f"group {g}: a message was delivered after a later one: {got}"
        if not allow_duplicates:
            assert len(got) == len(set(got)), f"group {g} delivered twice: {got}"
        assert set(got) | {m for m in in_dlq if m in produced[g]} == set(produced[g])
        if not allow_duplicates:  # a redelivered copy may itself fail and be dead-lettered
            assert not set(got) & in_dlq


@settings(max_examples=300, deadline=None)
@given(messages_st, schedule_st, st.sampled_from([0, 3]))
def test_block_group_keeps_order_and_loses_nothing(messages, schedule, replay_every) -> None:  # type: ignore[no-untyped-def]
    shard = _run(OnDlq.BLOCK_GROUP, messages, schedule, replay_every)
    _check_order_and_completeness(shard, messages, allow_duplicates=replay_every > 0)
    for g in GROUPS:
        dead = [m for dg, m, _ in shard.dlq if dg == g]
        if dead:  # nothing after the first dead-lettered message is delivered
            first = min(dead)
            assert all(m < first or (replay_every and m == first) for m in shard.delivered.get(g, []))
    # groups whose messages never failed were never sidelined
    failing = {g for g, answers in messages if any(a != OK for a in answers)}
    assert not (shard.sidelined_groups - failing)


@settings(max_examples=300, deadline=None)
@given(messages_st, schedule_st, st.sampled_from([0, 3]))
def test_skip_failed_keeps_order_and_loses_nothing(messages, schedule, replay_every) -> None:  # type: ignore[no-untyped-def]
    shard = _run(OnDlq.SKIP_FAILED, messages, schedule, replay_every)
    _check_order_and_completeness(shard, messages, allow_duplicates=replay_every > 0)
    for g in GROUPS:  # only messages whose own answers failed are in DLQ
        for dg, m, _ in shard.dlq:
            if dg == g:
                assert any(a != OK for a in messages[m[1]][1])


@settings(max_examples=200, deadline=None)
@given(messages_st, schedule_st)
def test_unsideline_replays_in_order_and_does_not_loop(messages, schedule) -> None:  # type: ignore[no-untyped-def]
    shard = _run(OnDlq.BLOCK_GROUP, messages, schedule, 0)
    before = {g: [m for dg, m, _ in shard.dlq if dg == g] for g in GROUPS}
    dlq_len = len(shard.dlq)
    for g in GROUPS:
        if before[g]:
            assert shard.unsideline(g) == before[g]
    while shard.rq:
        shard.read_retry()
    for g in GROUPS:
        got = shard.delivered.get(g, [])
        assert got == sorted(set(got))
    # every replayed message was delivered or went back to DLQ exactly once
    replayed = [m for g in GROUPS for m in before[g]]
    back = [m for _, m, off in shard.dlq if off >= dlq_len]
    assert len(back) == len(set(back))
    delivered = {m for g in GROUPS for m in shard.delivered.get(g, [])}
    assert set(replayed) <= delivered | set(back)


# One group failing a lot, read with schedules that mix MQ and RQ: the case where a failed head
# written again, copies re-sidelined behind it and new MQ copies interleave in RQ.
busy_group_st = st.lists(
    st.tuples(st.just("a"), st.lists(st.sampled_from([OK, RETRY, RETRY, FATAL]), max_size=4)),
    min_size=1,
    max_size=30,
)


@st.composite
def biased_schedule_st(draw: st.DrawFn) -> list[bool]:
    """Long runs of MQ reads or of RQ reads: read MQ with probability 0.2, 0.5 or 0.8."""
    p_mq = draw(st.sampled_from([0.2, 0.5, 0.8]))
    rnd = draw(st.randoms(use_true_random=False))
    return [rnd.random() < p_mq for _ in range(draw(st.integers(0, 150)))]


@settings(max_examples=1500, deadline=None)
@given(busy_group_st, biased_schedule_st(), st.sampled_from(list(OnDlq)))
def test_a_busy_failing_group_is_delivered_in_main_order(messages, schedule, policy) -> None:  # type: ignore[no-untyped-def]
    shard = _run(policy, messages, schedule, 0)
    _check_order_and_completeness(shard, messages, allow_duplicates=False)
    state = shard.states.get("a")
    assert state is None or (not state.rq.pending and state.rq_late == ())  # drained: nothing kept


def test_a_copy_in_a_later_rq_storage_topic_does_not_free_the_head() -> None:
    """After a shard change old RQ copies are fed into a new storage topic; the head's own copy
    may come after a follower's there, so a copy from another storage topic frees nothing."""
    s = on_sidelined(None, (0, 1), MessageState(0, 1, 0, 10), failed=True)
    s = on_sidelined(s, (0, 2), MessageState(0, 2, 0, 11), failed=False)
    assert decide_retry(s, (0, 2), (1, 0), OnDlq.BLOCK_GROUP) is Action.SIDELINE


# Every scenario up to this bound: 3 messages over 2 groups, each message's answers one of these
# four, every MQ/RQ read schedule of 5 steps, with and without an immediate crash replay.
ANSWER_CHOICES: list[list[str]] = [[OK], [RETRY], [RETRY, RETRY], [FATAL]]


def _scenarios() -> Iterator[tuple[list[tuple[str, list[str]]], list[bool], int]]:
    for groups in itertools.product("ab", repeat=3):
        for answers in itertools.product(ANSWER_CHOICES, repeat=3):
            messages = list(zip(groups, answers, strict=True))
            for schedule in itertools.product([True, False], repeat=5):
                for replay_every in (0, 2):
                    yield messages, list(schedule), replay_every


def _collapsed(delivered: dict[str, list[Position]]) -> dict[str, list[Position]]:
    """Each group's deliveries with a message delivered again right after itself counted once."""
    return {g: [m for n, m in enumerate(got) if n == 0 or got[n - 1] != m] for g, got in delivered.items()}


@pytest.mark.parametrize("policy", [OnDlq.BLOCK_GROUP, OnDlq.SKIP_FAILED])
def test_forgetting_settled_states_changes_no_decision_in_any_scenario(policy: OnDlq) -> None:
    """A settled state dropped once the reads passed its marks decides as keeping it, in every
    scenario of the bound: the same deliveries in the same order and the same dead letters. The
    one difference is the one a group that never failed has: a crash replay of a message
    delivered after the drop delivers it again, right after itself (no `handled` mark to skip it),
    which at-least-once allows. Only states that are not settled (something in RQ, a dead letter)
    are left at the end."""
    runs = forgotten = 0
    for messages, schedule, replay_every in _scenarios():
        kept = _run(policy, messages, schedule, replay_every)
        dropped = _run(policy, messages, schedule, replay_every, forget=True)
        where = f"{messages} {schedule} replay={replay_every}"
        if replay_every:
            assert _collapsed(dropped.delivered) == _collapsed(kept.delivered), where
            _check_order_and_completeness(dropped, messages, allow_duplicates=True)
        else:
            assert dropped.delivered == kept.delivered, where
        assert dropped.dlq == kept.dlq, where
        assert all(not settled(s) for s in dropped.states.values()), where
        runs += 1
        forgotten += len(kept.states) - len(dropped.states)
    assert runs == 8 * 64 * 32 * 2
    assert forgotten > 0  # the bound reaches states that recover
