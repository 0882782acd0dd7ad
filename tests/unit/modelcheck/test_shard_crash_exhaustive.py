"""Every interleaving, up to a bound, of a subscription shard as the runtime runs it and as kill -9
breaks it (app/subscription/runner.py), with the pure rules of app/subscription/state.py and the
orphan adoption of app/subscription/orphans.py. One MQ partition and one RQ partition, shared by
the groups; the endpoint answers OK or RETRY (503), so nothing reaches DLQ at this bound.

The durable side (the broker) holds MQ, the RQ log (copies confirmed when written), the state
changelog (the newest record per group; a tombstone is None) and the committed MQ and RQ offsets.
An owner (a running shard) holds its states in memory, its read positions, the offsets it knows
it committed, and an outbox of state writes sent but not yet confirmed. Its moves, in any order:
- read the next MQ or RQ record and decide (decide_main / decide_retry); a copy to RQ is
  confirmed before its state write is sent (the outbox), a delivery is seen by the endpoint;
- land the oldest state write of its outbox (writes land in order: one slot partition);
- commit MQ, or RQ, to its read position, each alone (one can land and the other not), only
  with an empty outbox (`states.flush()` comes first);
- forget a state `forgettable` allows against the offsets it committed, with an empty outbox
  (`_forget_settled`): a tombstone is sent;
- be killed (kill -9): its memory and outbox are lost. A new owner then starts as
  `ShardRunner.run` does: states from the changelog, every RQ copy from the committed RQ offset
  adopted (`adopt`) and written, reading from the committed offsets.
With `overlap`, a new owner may also start while the old one runs on (a stop that timed out, a
paused worker): both read, deliver, write and commit until the old one is killed or stops. With
`fenced`, each owner has an epoch, a takeover raises it, and every write of an older owner (RQ
copy, state write, commit) is refused: the old owner stops at its first one.

Checked in every reachable state, on what the endpoint saw, the order rule of `endpoint_order`
(a message older than one delivered only as the start of a repeated run); where nothing is left
to do, that no run was left unrepeated (`... 41, 42, 43, 16`) and every message was delivered.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import pytest

from app.ordered.orphans import Copy as Orphan
from app.ordered.orphans import adopt
from app.ordered.policy import OnDlq, RetryPolicy
from app.ordered.records import FailureInfo, InternalMeta
from app.ordered.rules import (
    Action,
    GroupState,
    MessageState,
    decide_main,
    decide_retry,
    forgettable,
    on_delivered,
    on_sidelined,
    on_skipped,
)
from tests.unit.modelcheck.bfs import explore
from tests.unit.modelcheck.endpoint_order import Seen

OK, RETRY = "ok", "retry"
POLICY = RetryPolicy(max_attempts=3)
ON_DLQ = OnDlq.SKIP_FAILED
FAILURE = FailureInfo("EndpointUnavailable", "503", "t[0]@0", 0, "failed")


@dataclass(frozen=True)
class Bound:
    groups: int
    messages: int
    failures: int  # per message, over all its attempts
    crashes: int  # kill -9 of an owner, per run
    overlaps: int  # takeovers while the old owner still runs, per run

    def __str__(self) -> str:
        return (
            f"{self.groups} groups x {self.messages} messages, up to {self.failures} failure(s) each, "
            f"{self.crashes} kill(s), {self.overlaps} overlap(s)"
        )


@dataclass(frozen=True)
class Copy:
    group: int
    main: int
    failed: int  # failed attempts so far
    failure: bool  # written by a failed attempt (a sidelined copy carries no failure)


@dataclass(frozen=True)
class Owner:
    epoch: int
    states: tuple[GroupState | None, ...]
    outbox: tuple[tuple[int, GroupState | None], ...]  # state writes sent, not confirmed
    mq_pos: int
    rq_pos: int
    mq_known: int  # the offsets it committed (ShardRunner._committed)
    rq_known: int


@dataclass(frozen=True)
class World:
    mq: tuple[int, ...]  # the group of each message; main position = index
    rq: tuple[Copy, ...]  # RQ offset = index
    log: tuple[GroupState | None, ...]  # the changelog's newest record per group
    mq_committed: int
    rq_committed: int
    epoch: int  # the newest owner's
    owners: tuple[Owner, ...]  # running owners, oldest first
    seen: tuple[Seen, ...]  # per group, what the endpoint took
    failures: tuple[int, ...]
    crashes_left: int
    overlaps_left: int


def _pos(n: int) -> tuple[int, int]:
    return (0, n)


class Model:
    def __init__(self, bound: Bound, fenced: bool = False, fenced_endpoint: bool = False) -> None:
        self.bound, self.fenced, self.fenced_endpoint = bound, fenced, fenced_endpoint

    def roots(self) -> list[World]:
        worlds = []
        g, n = self.bound.groups, self.bound.messages
        for rest in itertools.product(range(g), repeat=n - 1):
            mq = (0, *rest)
            if max(mq) != g - 1:
                continue
            first = Owner(0, (None,) * g, (), 0, 0, 0, 0)
            budget = (self.bound.crashes, self.bound.overlaps)
            worlds.append(World(mq, (), (None,) * g, 0, 0, 0, (first,), (Seen(),) * g, (0,) * n, *budget))
        return worlds

    # -- helpers --------------------------------------------------------------------------------
    @staticmethod
    def _set(w: World, i: int, o: Owner | None) -> World:
        owners = list(w.owners)
        if o is None:
            del owners[i]
        else:
            owners[i] = o
        return replace(w, owners=tuple(owners))

    def _refused(self, w: World, o: Owner) -> bool:
        return self.fenced and o.epoch < w.epoch

    @staticmethod
    def _put(o: Owner, group: int, state: GroupState | None) -> Owner:
        if state is None or state == o.states[group]:  # an unchanged write decides nothing
            return o
        states = list(o.states)
        states[group] = state
        return replace(o, states=tuple(states), outbox=(*o.outbox, (group, state)))

    @staticmethod
    def _deliver(w: World, group: int, main: int) -> World:
        seen = list(w.seen)
        seen[group] = seen[group].took(main)
        return replace(w, seen=tuple(seen))

    @staticmethod
    def adopt(state: GroupState | None, orphan: Orphan, earlier: list[MessageState]) -> GroupState | None:
        return adopt(state, orphan, 0, earlier)

    def start(self, w: World) -> Owner:
        """ShardRunner.run: states from the changelog, RQ copies from the committed offset adopted."""
        states = list(w.log)
        earlier: list[list[MessageState]] = [[] for _ in states]
        for at in range(w.rq_committed, len(w.rq)):
            c = w.rq[at]
            meta = InternalMeta(
                _pos(c.main), 0, str(c.main), c.failed, 0, failure=FAILURE if c.failure else None
            )
            orphan = Orphan("rq", "g", meta, MessageState.at(_pos(c.main), _pos(at)))
            adopted = self.adopt(states[c.group], orphan, earlier[c.group])
            if adopted is not None:
                states[c.group] = adopted
            earlier[c.group].append(orphan.at)
        return Owner(
            w.epoch, tuple(states), (), w.mq_committed, w.rq_committed, w.mq_committed, w.rq_committed
        )

    # -- an owner's moves -----------------------------------------------------------------------
    def _handle(
        self, w: World, i: int, group: int, main: int, read_at: int | None, failed: int, label: str
    ) -> list[tuple[str, World]]:
        o = w.owners[i]
        state = o.states[group]
        read = None if read_at is None else MessageState.at(_pos(main), _pos(read_at))
        if read_at is None:
            action = decide_main(state, _pos(main), ON_DLQ)
        else:
            action = decide_retry(state, _pos(main), _pos(read_at), ON_DLQ)
        if action is Action.SKIP:
            return [(f"{label}:skip", self._set(w, i, self._put(o, group, on_skipped(state, read))))]
        assert action is not Action.FOLLOW_TO_DLQ
        outcomes = [(OK, failed)]
        if action is Action.SIDELINE:
            outcomes = [("sideline", failed)]
        elif w.failures[main] < self.bound.failures and POLICY.may_retry(failed + 1):
            outcomes.append((RETRY, failed + 1))
        moves = []
        if action is Action.DELIVER and self.fenced_endpoint and o.epoch < w.epoch:
            return [(f"{label}: delivery refused, old owner stops", self._set(w, i, None))]
        for answer, attempts in outcomes:
            after = w
            if answer == OK:
                after = self._deliver(after, group, main)
                new = on_delivered(state, _pos(main), read)
                moves.append((f"{label}:ok", self._set(after, i, self._put(o, group, new))))
                continue
            if answer == RETRY:
                failures = list(after.failures)
                failures[main] += 1
                after = replace(after, failures=tuple(failures))
            if self._refused(after, o):  # the copy is refused: the old owner stops
                moves.append((f"{label}:{answer} refused, old owner stops", self._set(after, i, None)))
                continue
            copy = Copy(group, main, attempts, answer == RETRY)
            written = MessageState.at(_pos(main), _pos(len(after.rq)))
            after = replace(after, rq=(*after.rq, copy))
            new = on_sidelined(state, _pos(main), written, failed=answer == RETRY, read_from_rq=read)
            moves.append((f"{label}:{answer}", self._set(after, i, self._put(o, group, new))))
        return moves

    def owner_moves(self, w: World, i: int) -> list[tuple[str, World]]:
        o = w.owners[i]
        who = f"owner{o.epoch}"
        moves: list[tuple[str, World]] = []
        if o.mq_pos < len(w.mq):
            at = replace(o, mq_pos=o.mq_pos + 1)
            m = o.mq_pos
            moves += self._handle(self._set(w, i, at), i, w.mq[m], m, None, 0, f"{who} mq{m}")
        if o.rq_pos < len(w.rq):
            c = w.rq[o.rq_pos]
            label = f"{who} rq@{o.rq_pos}(m{c.main})"
            moves += self._handle(
                self._set(w, i, replace(o, rq_pos=o.rq_pos + 1)),
                i,
                c.group,
                c.main,
                o.rq_pos,
                c.failed,
                label,
            )
        for queue, pos, known in (("mq", o.mq_pos, o.mq_known), ("rq", o.rq_pos, o.rq_known)):
            if pos <= known:
                continue
            flushed = self._land(w, i, len(o.outbox))  # states.flush() before the commit
            if flushed is None or self._refused(w, o):
                moves.append((f"{who} commit {queue} refused, stops", self._set(w, i, None)))
                continue
            if queue == "mq":
                o2, done = replace(flushed.owners[i], mq_known=pos), replace(flushed, mq_committed=pos)
            else:
                o2, done = replace(flushed.owners[i], rq_known=pos), replace(flushed, rq_committed=pos)
            moves.append((f"{who} commit {queue}={pos}", self._set(done, i, self._forget(o2))))
        return moves

    def _land(self, w: World, i: int, k: int) -> World | None:
        """The owner's first `k` state writes land (None: refused, the owner is fenced)."""
        o = w.owners[i]
        if not k:
            return w
        if self._refused(w, o):
            return None
        log = list(w.log)
        for group, state in o.outbox[:k]:
            log[group] = state
        return self._set(replace(w, log=tuple(log)), i, replace(o, outbox=o.outbox[k:]))

    @staticmethod
    def _forget(o: Owner) -> Owner:
        """_forget_settled after a commit: every state forgettable against the offsets committed."""
        states, outbox = list(o.states), list(o.outbox)
        for group, state in enumerate(o.states):
            if state is not None and forgettable(state, _pos(o.mq_known), _pos(o.rq_known)):
                states[group] = None
                outbox.append((group, None))
        return replace(o, states=tuple(states), outbox=tuple(outbox))

    def _ends(self, w: World, i: int, how: str) -> list[tuple[str, World]]:
        """The owner dies: a prefix of its unconfirmed state writes landed, the rest is lost."""
        o = w.owners[i]
        out = []
        for k in range(len(o.outbox) + 1):
            landed = self._land(w, i, k)
            if landed is not None:
                out.append(
                    (
                        f"{how} owner{o.epoch} ({k} of {len(o.outbox)} state writes landed)",
                        self._set(landed, i, None),
                    )
                )
        return out

    def successors(self, w: World) -> list[tuple[str, World]]:
        moves: list[tuple[str, World]] = []
        for i in range(len(w.owners)):
            moves += self.owner_moves(w, i)
        if not w.owners:
            return [(f"owner{w.epoch + 1} starts", self._started(w, ()))]
        newest = w.owners[-1]
        if w.crashes_left:
            for i in range(len(w.owners)):
                moves += self._ends(replace(w, crashes_left=w.crashes_left - 1), i, "kill -9")
        for i in range(len(w.owners) - 1):  # an old owner stops (cancelled, maybe mid-flush)
            moves += self._ends(w, i, "stop of")
        if w.overlaps_left and len(w.owners) == 1 and self._busy(w, newest):
            for k in range(len(newest.outbox) + 1):  # what of its writes the new owner loads
                landed = self._land(w, 0, k)
                assert landed is not None
                label = f"owner{w.epoch + 1} starts beside owner{newest.epoch} ({k} state writes landed)"
                moves.append((label, self._started(landed, landed.owners)))
        return moves

    def _started(self, w: World, running: tuple[Owner, ...]) -> World:
        w = replace(w, epoch=w.epoch + 1, overlaps_left=w.overlaps_left - (1 if running else 0))
        return replace(w, owners=(*running, self.start(w)))

    @staticmethod
    def _busy(w: World, o: Owner) -> bool:
        return o.mq_pos < len(w.mq) or o.rq_pos < len(w.rq) or bool(o.outbox)

    # -- checks ---------------------------------------------------------------------------------
    def invariant(self, w: World) -> None:
        for group, seen in enumerate(w.seen):
            assert seen.broken is None, f"group {group}: {seen.broken}"

    def at_end(self, w: World) -> None:
        for group, seen in enumerate(w.seen):
            why = seen.at_end()
            assert why is None, f"group {group}: {why}"
        done = set().union(*(s.delivered for s in w.seen))
        assert done == set(range(len(w.mq))), f"lost: {sorted(set(range(len(w.mq))) - done)}"


class OldAdoption(Model):
    """Adoption as it was: a copy recorded alone, nothing inferred from the copies before it."""

    @staticmethod
    def adopt(state: GroupState | None, orphan: Orphan, earlier: list[MessageState]) -> GroupState | None:
        return adopt(state, orphan, 0)


def follow(model: Model, mq: tuple[int, ...], steps: list[str]) -> World:
    """The world a trace of move labels reaches from the root with this MQ."""
    (w,) = [root for root in model.roots() if root.mq == mq]
    for step in steps:
        found = [after for label, after in model.successors(w) if label == step]
        assert found, f"no move {step!r}; there are {[label for label, _ in model.successors(w)]}"
        w = found[0]
    return w


def seen_by_endpoint(w: World, group: int = 0) -> tuple[Seen, str | None]:
    return w.seen[group], w.seen[group].at_end()


# A message fails, its copy is delivered, the next goes straight from MQ, the third fails: kill -9
# before any of those state writes landed. The restart adopts both copies; the copy of 2 marks 2
# handled, so the MQ replay skips 1, while the copy of 0 (its read lost too) is delivered again.
LOST_READS = [
    "owner0 mq0:retry",
    "owner0 rq@0(m0):ok",
    "owner0 mq1:ok",
    "owner0 mq2:retry",
    "kill -9 owner0 (0 of 4 state writes landed)",
    "owner1 starts",
    "owner1 rq@0(m0):ok",
    "owner1 rq@1(m2):ok",
]
# Two owners, no fencing: the old one sidelines 1 behind 0 after the new one loaded the state; the
# new one delivers 0, 1, 2, then reads the old owner's copy of 1, which its state never knew.
OLD_OWNERS_COPY = [
    "owner0 mq0:retry",
    "owner0 commit mq=1",
    "owner1 starts beside owner0 (0 state writes landed)",
    "owner0 mq1:sideline",
    "stop of owner0 (0 of 1 state writes landed)",
    "owner1 rq@0(m0):ok",
    "owner1 mq1:ok",
    "owner1 mq2:ok",
    "owner1 rq@1(m1):ok",
]
# Two owners: the old one, on the fast path (no write to fence), delivers after the new one.
OLD_OWNERS_DELIVERY = [
    "owner1 starts beside owner0 (0 state writes landed)",
    "owner1 mq0:ok",
    "owner1 mq1:ok",
    "owner0 mq0:ok",
    "stop of owner0 (0 of 0 state writes landed)",
]

SINGLE = [Bound(1, 3, 1, 1, 0), Bound(2, 3, 1, 1, 0), Bound(1, 3, 1, 2, 0)]
OVERLAP = [Bound(1, 2, 1, 0, 1), Bound(2, 2, 1, 0, 1)]


@pytest.mark.parametrize("bound", SINGLE, ids=str)
def test_kill_9_at_any_step_keeps_group_order_and_loses_nothing(bound: Bound) -> None:
    model = Model(bound)
    seen = explore(model.roots(), model.successors, model.invariant, model.at_end)
    print(f"shard with kills, {bound}: {seen.states} states, {seen.terminal} final, 0 violations")
    assert seen.terminal > 0


def test_adoption_without_the_copies_before_breaks_a_replayed_run() -> None:
    bound = SINGLE[0]
    old = seen_by_endpoint(follow(OldAdoption(bound), (0, 0, 0), LOST_READS))[0]
    assert old.broken == "2 delivered while a restarted run had yet to repeat [1]"  # 0, 1, 0, 2
    with pytest.raises(AssertionError, match="restarted run"):
        explore(OldAdoption(bound).roots(), OldAdoption(bound).successors, Model(bound).invariant)
    with pytest.raises(AssertionError, match="no move"):  # now the copy of 0 is known as read
        follow(Model(bound), (0, 0, 0), LOST_READS)


@pytest.mark.parametrize("bound", OVERLAP, ids=str)
def test_overlapping_owners_keep_group_order_with_fencing(bound: Bound) -> None:
    model = Model(bound, fenced=True, fenced_endpoint=True)
    seen = explore(model.roots(), model.successors, model.invariant, model.at_end)
    print(f"overlapping owners, fenced: {bound}: {seen.states} states, {seen.terminal} final, 0 violations")
    assert seen.terminal > 0


def test_an_old_owners_copy_is_delivered_stale_without_fencing() -> None:
    bound = Bound(1, 3, 1, 0, 1)
    seen, why = seen_by_endpoint(follow(Model(bound), (0, 0, 0), OLD_OWNERS_COPY))
    assert seen.last == 1 and why == "ended on the stale 1: the restarted run never repeated [2]"
    with pytest.raises(AssertionError, match="refused"):  # fenced: the copy is never written
        follow(Model(bound, fenced=True), (0, 0, 0), OLD_OWNERS_COPY)


def test_fencing_writes_alone_lets_an_old_owner_deliver_stale() -> None:
    bound = OVERLAP[0]
    for fenced in (False, True):
        seen, why = seen_by_endpoint(follow(Model(bound, fenced=fenced), (0, 0), OLD_OWNERS_DELIVERY))
        assert seen.last == 0 and why == "ended on the stale 0: the restarted run never repeated [1]"
    with pytest.raises(AssertionError, match="no move"):  # its delivery is refused
        follow(Model(bound, fenced=True, fenced_endpoint=True), (0, 0), OLD_OWNERS_DELIVERY)
