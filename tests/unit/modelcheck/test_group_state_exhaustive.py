"""Every interleaving of a subscription shard's reads, up to a bound, checked with the pure
GroupState rules (app/subscription/state.py), as the Varadhi design runs them: MQ read in order, RQ read as
a FIFO, each delivery attempt answered OK, RETRY (retriable failure) or FATAL, MQ messages read
again after a crash (state kept, offset not committed), DLQ entries unsidelined back into RQ, and,
with `forget`, settled states dropped at any moment (as a shard does after a commit: only what
`forgettable` allows against what is committed, the message a crash may still replay excluded).

Checked in every reachable state: each group's deliveries are in main order (a crash replay may
repeat the message just delivered, nothing else); with BLOCK_GROUP nothing after a group's
dead-lettered message is delivered until it is unsidelined. Checked where nothing is left to do:
every message was delivered or is in DLQ, and each group's retry state is drained.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import pytest

from app.ordered.policy import OnDlq, RetryPolicy
from app.ordered.rules import (
    Action,
    GroupState,
    MessageState,
    decide_main,
    decide_retry,
    forgettable,
    on_dead_lettered,
    on_delivered,
    on_sidelined,
    on_skipped,
    on_unsidelined,
)
from tests.unit.modelcheck.bfs import explore

OK, RETRY, FATAL = "ok", "retry", "fatal"
POLICY = RetryPolicy(max_attempts=3)


@dataclass(frozen=True)
class Bound:
    groups: int
    messages: int
    failures: int  # per message, over all its attempts
    replays: int  # MQ re-reads after a crash, per run
    unsidelines: int  # per run (BLOCK_GROUP only)

    def __str__(self) -> str:
        return (
            f"{self.groups} groups x {self.messages} messages, up to {self.failures} failures each, "
            f"{self.replays} crash replay(s), {self.unsidelines} unsideline(s)"
        )


@dataclass(frozen=True)
class Copy:
    group: int
    main: int
    internal: int
    failed: int
    replay: bool  # unsidelined from DLQ: a failure sends it straight back to DLQ


@dataclass(frozen=True)
class World:
    mq: tuple[int, ...]  # the group of each message, in produce order; main position = index
    next_mq: int
    rq: tuple[Copy, ...]
    rq_written: int
    dlq: tuple[tuple[int, int], ...]  # (group, main), DLQ offset = index
    states: tuple[GroupState | None, ...]
    delivered: tuple[tuple[int, ...], ...]
    failures: tuple[int, ...]
    replays_left: int
    unsidelines_left: int
    unsidelined: frozenset[int]  # mains replayed from DLQ


def _pos(n: int) -> tuple[int, int]:
    return (0, n)


class Shard:
    def __init__(self, policy: OnDlq, bound: Bound, forget: bool = False) -> None:
        self.on_dlq, self.bound, self.forget = policy, bound, forget

    def roots(self) -> list[World]:
        worlds = []
        for rest in itertools.product(range(self.bound.groups), repeat=self.bound.messages - 1):
            mq = (0, *rest)  # the first message's group named 0: the others are symmetric
            if max(mq) != self.bound.groups - 1:
                continue  # fewer groups used than the bound names: covered by a smaller bound
            worlds.append(
                World(
                    mq,
                    0,
                    (),
                    0,
                    (),
                    (None,) * self.bound.groups,
                    ((),) * self.bound.groups,
                    (0,) * len(mq),
                    self.bound.replays,
                    self.bound.unsidelines if self.on_dlq is OnDlq.BLOCK_GROUP else 0,
                    frozenset(),
                )
            )
        return worlds

    # -- writes ---------------------------------------------------------------------------------

    @staticmethod
    def _state(w: World, group: int, state: GroupState | None) -> World:
        states = list(w.states)
        states[group] = state if state is not None else w.states[group]
        return replace(w, states=tuple(states))

    @staticmethod
    def _to_rq(w: World, copy: Copy) -> tuple[World, MessageState]:
        copy = replace(copy, internal=w.rq_written)
        return replace(w, rq=(*w.rq, copy), rq_written=w.rq_written + 1), MessageState.at(
            _pos(copy.main), _pos(copy.internal)
        )

    @staticmethod
    def _to_dlq(w: World, group: int, main: int) -> tuple[World, MessageState]:
        return replace(w, dlq=(*w.dlq, (group, main))), MessageState.at(_pos(main), _pos(len(w.dlq)))

    # -- moves ----------------------------------------------------------------------------------

    def answers(self, w: World, main: int) -> list[str]:
        return [OK, RETRY, FATAL] if w.failures[main] < self.bound.failures else [OK]

    def _attempt(
        self,
        w: World,
        group: int,
        main: int,
        failed: int,
        read: MessageState | None,
        replay: bool,
        answer: str,
    ) -> World:
        state = w.states[group]
        if answer == OK:
            delivered = list(w.delivered)
            delivered[group] = (*delivered[group], main)
            w = replace(w, delivered=tuple(delivered))
            return self._state(w, group, on_delivered(state, _pos(main), read))
        failures = list(w.failures)
        failures[main] += 1
        w = replace(w, failures=tuple(failures))
        if answer == RETRY and not replay and POLICY.may_retry(failed + 1):
            w, written = self._to_rq(w, Copy(group, main, 0, failed + 1, False))
            return self._state(
                w, group, on_sidelined(state, _pos(main), written, failed=True, read_from_rq=read)
            )
        w, written = self._to_dlq(w, group, main)
        return self._state(w, group, on_dead_lettered(state, _pos(main), written, read))

    def _read_main(self, w: World, main: int) -> list[tuple[str, World]]:
        group = w.mq[main]
        state = w.states[group]
        action = decide_main(state, _pos(main), self.on_dlq)
        if action is Action.SKIP:
            return [(f"mq{main}:skip", w)]
        if action is Action.FOLLOW_TO_DLQ:
            w, written = self._to_dlq(w, group, main)
            return [(f"mq{main}:follow", self._state(w, group, on_dead_lettered(state, _pos(main), written)))]
        if action is Action.SIDELINE:
            w, written = self._to_rq(w, Copy(group, main, 0, 0, False))
            return [
                (
                    f"mq{main}:sideline",
                    self._state(w, group, on_sidelined(state, _pos(main), written, failed=False)),
                )
            ]
        return [
            (f"mq{main}:{a}", self._attempt(w, group, main, 0, None, False, a)) for a in self.answers(w, main)
        ]

    def _read_rq(self, w: World) -> list[tuple[str, World]]:
        copy, w = w.rq[0], replace(w, rq=w.rq[1:])
        state = w.states[copy.group]
        read = MessageState.at(_pos(copy.main), _pos(copy.internal))
        action = decide_retry(state, _pos(copy.main), _pos(copy.internal), self.on_dlq)
        label = f"rq{copy.main}@{copy.internal}"
        if action is Action.SKIP:
            return [(f"{label}:skip", self._state(w, copy.group, on_skipped(state, read)))]
        if action is Action.FOLLOW_TO_DLQ:
            w, written = self._to_dlq(w, copy.group, copy.main)
            return [
                (
                    f"{label}:follow",
                    self._state(w, copy.group, on_dead_lettered(state, _pos(copy.main), written, read)),
                )
            ]
        if action is Action.SIDELINE:
            w, written = self._to_rq(w, copy)
            after = on_sidelined(state, _pos(copy.main), written, failed=False, read_from_rq=read)
            return [(f"{label}:resideline", self._state(w, copy.group, after))]
        return [
            (f"{label}:{a}", self._attempt(w, copy.group, copy.main, copy.failed, read, copy.replay, a))
            for a in self.answers(w, copy.main)
        ]

    def _unsideline(self, w: World, group: int) -> World | None:
        state = w.states[group]
        if state is None:
            return None
        c = state.dlq.c.internal if state.dlq.c is not None else (0, -1)
        picked = [(main, off) for off, (g, main) in enumerate(w.dlq) if g == group and _pos(off) > c]
        if not picked:
            return None
        written = []
        for main, _ in picked:
            w, at = self._to_rq(w, Copy(group, main, 0, 0, True))
            written.append(at)
        upto = MessageState.at(_pos(picked[-1][0]), _pos(picked[-1][1]))
        w = replace(
            w,
            unsidelines_left=w.unsidelines_left - 1,
            unsidelined=w.unsidelined | {main for main, _ in picked},
        )
        return self._state(w, group, on_unsidelined(state, upto, written))

    def successors(self, w: World) -> list[tuple[str, World]]:
        moves: list[tuple[str, World]] = []
        if w.next_mq < len(w.mq):
            moves += self._read_main(replace(w, next_mq=w.next_mq + 1), w.next_mq)
        if w.rq:
            moves += self._read_rq(w)
        if w.replays_left and w.next_mq:
            replayed = self._read_main(replace(w, replays_left=w.replays_left - 1), w.next_mq - 1)
            moves += [(f"crash, {label}", after) for label, after in replayed]
        if w.unsidelines_left:
            for group in range(len(w.states)):
                after = self._unsideline(w, group)
                if after is not None:
                    moves.append((f"unsideline g{group}", after))
        if self.forget:
            moves += self._forgets(w)
        return moves

    @staticmethod
    def _forgets(w: World) -> list[tuple[str, World]]:
        """Drop a state `forgettable` allows: MQ committed below the message a crash may still
        read again (while a replay is left), RQ below its head (consumed copies are not re-read)."""
        main_from = _pos(w.next_mq - 1 if w.replays_left and w.next_mq else w.next_mq)
        rq_from = _pos(w.rq[0].internal if w.rq else w.rq_written)
        moves = []
        for group, state in enumerate(w.states):
            if state is not None and forgettable(state, main_from, rq_from):
                states = list(w.states)
                states[group] = None
                moves.append((f"forget g{group}", replace(w, states=tuple(states))))
        return moves

    # -- invariants -----------------------------------------------------------------------------

    def invariant(self, w: World) -> None:
        for group, got in enumerate(w.delivered):
            assert list(got) == sorted(got), f"group {group} delivered out of order: {got}"
            if not self.bound.replays:
                assert len(got) == len(set(got)), f"group {group} delivered twice: {got}"
            if self.on_dlq is OnDlq.BLOCK_GROUP:
                dead = [m for g, m in w.dlq if g == group and m not in w.unsidelined]
                if dead:
                    late = [m for m in got if m > min(dead)]
                    assert not late, f"group {group} delivered {late} past its dead-lettered {min(dead)}"

    def at_end(self, w: World) -> None:
        done = {m for got in w.delivered for m in got} | {m for _, m in w.dlq}
        assert done == set(range(len(w.mq))), f"lost: {sorted(set(range(len(w.mq))) - done)}"
        for group, state in enumerate(w.states):
            assert state is None or (not state.rq.pending and state.rq_late == ()), f"group {group}: {state}"


BOUNDS = {
    OnDlq.BLOCK_GROUP: [Bound(1, 4, 2, 1, 1), Bound(2, 3, 2, 1, 1)],
    OnDlq.SKIP_FAILED: [Bound(1, 5, 2, 1, 0), Bound(2, 3, 2, 1, 0)],
}


@pytest.mark.parametrize("forget", [False, True], ids=["kept", "forgotten"])
@pytest.mark.parametrize(
    ("policy", "bound"), [(p, b) for p, bounds in BOUNDS.items() for b in bounds], ids=str
)
def test_every_interleaving_keeps_group_order_and_loses_nothing(
    policy: OnDlq, bound: Bound, forget: bool
) -> None:
    shard = Shard(policy, bound, forget)
    seen = explore(shard.roots(), shard.successors, shard.invariant, shard.at_end)
    print(
        f"group state, {policy}, forget={forget}: {bound}: {seen.states} states, "
        f"{seen.terminal} final, 0 violations"
    )
    assert seen.terminal > 0
