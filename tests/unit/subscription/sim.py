"""A one-shard model of subscription delivery driven only by the pure GroupState rules.

MQ is a list, RQ a FIFO, DLQ a list; the endpoint's answer per (message, attempt) is given.
Used by the property tests to check order and completeness through failures.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from app.ordered.policy import OnDlq, RetryPolicy
from app.ordered.rules import (
    Action,
    GroupState,
    MessageState,
    Position,
    decide_main,
    decide_retry,
    forgettable,
    on_dead_lettered,
    on_delivered,
    on_sidelined,
    on_skipped,
    on_unsidelined,
)

OK, RETRY, FATAL = "ok", "retry", "fatal"


@dataclass
class RqRecord:
    group: str
    main: Position
    internal: Position
    failed_attempts: int
    replay: bool = False


@dataclass
class Shard:
    policy: RetryPolicy
    on_dlq: OnDlq
    answers: dict[Position, list[str]]
    states: dict[str, GroupState] = field(default_factory=dict)
    rq: deque[RqRecord] = field(default_factory=deque)
    rq_written: int = 0
    dlq: list[tuple[str, Position, int]] = field(default_factory=list)  # group, main, dlq offset
    delivered: dict[str, list[Position]] = field(default_factory=dict)
    sidelined_groups: set[str] = field(default_factory=set)
    attempts: dict[Position, int] = field(default_factory=dict)
    main_read: int = 0  # MQ offsets below this were read

    def _answer(self, main: Position) -> str:
        n = self.attempts.get(main, 0)
        self.attempts[main] = n + 1
        answers = self.answers.get(main, [])
        return answers[n] if n < len(answers) else OK

    def _set(self, group: str, state: GroupState | None) -> None:
        if state is not None:
            self.states[group] = state

    def _to_rq(self, group: str, main: Position, failed: int, replay: bool = False) -> MessageState:
        written = MessageState.at(main, (0, self.rq_written))
        self.rq.append(RqRecord(group, main, written.internal, failed, replay))
        self.rq_written += 1
        self.sidelined_groups.add(group)
        return written

    def _to_dlq(self, group: str, main: Position) -> MessageState:
        written = MessageState.at(main, (0, len(self.dlq)))
        self.dlq.append((group, main, len(self.dlq)))
        return written

    def _attempt(
        self, group: str, main: Position, failed_before: int, read: MessageState | None, replay: bool
    ) -> None:
        state = self.states.get(group)
        answer = self._answer(main)
        if answer == OK:
            self.delivered.setdefault(group, []).append(main)
            self._set(group, on_delivered(state, main, read))
            return
        failed = failed_before + 1
        if answer == RETRY and not replay and self.policy.may_retry(failed):
            written = self._to_rq(group, main, failed)
            self._set(group, on_sidelined(state, main, written, failed=True, read_from_rq=read))
        else:
            self._set(group, on_dead_lettered(state, main, self._to_dlq(group, main), read))

    def read_main(self, group: str, main: Position) -> None:
        self.main_read = max(self.main_read, main[1] + 1)
        state = self.states.get(group)
        action = decide_main(state, main, self.on_dlq)
        if action is Action.SKIP:
            return
        if action is Action.FOLLOW_TO_DLQ:
            self._set(group, on_dead_lettered(state, main, self._to_dlq(group, main)))
        elif action is Action.SIDELINE:
            self._set(group, on_sidelined(state, main, self._to_rq(group, main, 0), failed=False))
        else:
            self._attempt(group, main, 0, None, False)

    def read_retry(self) -> None:
        rec = self.rq.popleft()
        state = self.states.get(rec.group)
        read = MessageState.at(rec.main, rec.internal)
        action = decide_retry(state, rec.main, rec.internal, self.on_dlq)
        if action is Action.SKIP:
            self._set(rec.group, on_skipped(state, read))
        elif action is Action.FOLLOW_TO_DLQ:
            self._set(rec.group, on_dead_lettered(state, rec.main, self._to_dlq(rec.group, rec.main), read))
        elif action is Action.SIDELINE:
            written = self._to_rq(rec.group, rec.main, rec.failed_attempts, rec.replay)
            self._set(rec.group, on_sidelined(state, rec.main, written, failed=False, read_from_rq=read))
        else:
            self._attempt(rec.group, rec.main, rec.failed_attempts, read, rec.replay)

    def forget_settled(self) -> list[str]:
        """Drop the states `forgettable` allows, as a shard does after each commit. Committed:
        everything read so far (a crash replay re-reads only the message just read, before this)."""
        main_from = (0, self.main_read)
        rq_from = self.rq[0].internal if self.rq else (0, self.rq_written)
        gone = [g for g, s in self.states.items() if forgettable(s, main_from, rq_from)]
        for g in gone:
            del self.states[g]
        return gone

    def unsideline(self, group: str) -> list[Position]:
        """Replay the group's unresolved DLQ messages into RQ, in DLQ order."""
        state = self.states[group]
        c = state.dlq.c.internal if state.dlq.c is not None else (0, -1)
        picked = [(m, off) for g, m, off in self.dlq if g == group and (0, off) > c]
        if not picked:
            return []
        written = [self._to_rq(group, main, 0, replay=True) for main, _off in picked]
        upto = MessageState.at(picked[-1][0], (0, picked[-1][1]))
        self.states[group] = on_unsidelined(state, upto, written)
        return [m for m, _ in picked]
