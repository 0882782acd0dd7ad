"""GroupState rules (the Varadhi design, "GroupState"): what to do with a group's next message and how
each outcome moves the group's RQ/DLQ p/c MessageStates.

Positions are `(storage_topic_idx, offset)` tuples. Within one group they are totally ordered:
a group lives in one partition per storage topic and storage topics are read in order.
Everything here is pure; the shard runner stores the states in a Faust table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import orjson

from app.ordered.errors import UndecodableState
from app.ordered.policy import OnDlq

__all__ = [
    "Action",
    "DlqStatus",
    "GroupState",
    "MessageState",
    "Position",
    "QueueState",
    "decide_main",
    "decide_retry",
    "dlq_status",
    "forgettable",
    "is_blocked",
    "on_dead_lettered",
    "on_delivered",
    "on_dlq_discarded",
    "on_sidelined",
    "on_skipped",
    "on_unsidelined",
    "settled",
]

Position = tuple[int, int]
_FAR_FUTURE: Position = (1 << 62, 0)


class Action(StrEnum):
    DELIVER = "deliver"
    SIDELINE = "sideline"  # to RQ, behind the group's pending messages; not a failure
    FOLLOW_TO_DLQ = "follow_to_dlq"  # the group is blocked by a DLQ'd message
    SKIP = "skip"  # already handled (a replay after a crash)


@dataclass(frozen=True, slots=True)
class MessageState:
    main_topic_idx: int
    main_topic_offset: int
    internal_topic_idx: int
    internal_topic_offset: int

    @property
    def main(self) -> Position:
        return (self.main_topic_idx, self.main_topic_offset)

    @property
    def internal(self) -> Position:
        return (self.internal_topic_idx, self.internal_topic_offset)

    @classmethod
    def at(cls, main: Position, internal: Position) -> MessageState:
        return cls(main[0], main[1], internal[0], internal[1])


@dataclass(frozen=True, slots=True)
class QueueState:
    """p: the latest message of the group written to this queue; c: the latest one consumed."""

    p: MessageState | None = None
    c: MessageState | None = None

    @property
    def pending(self) -> bool:
        return self.p is not None and (self.c is None or self.p.internal > self.c.internal)

    def produced(self, written: MessageState) -> QueueState:
        if self.p is not None and self.p.internal >= written.internal:
            return self
        return replace(self, p=written)

    def consumed(self, read: MessageState) -> QueueState:
        if self.c is not None and self.c.internal >= read.internal:
            return self
        return replace(self, c=read)


@dataclass(frozen=True, slots=True)
class GroupState:
    rq: QueueState = QueueState()
    dlq: QueueState = QueueState()
    # Main position of the group's oldest failed message waiting in RQ; later ones queue behind it.
    retry_head: Position | None = None
    # RQ position of the retry head's newest copy. A copy read from RQ beyond it means the head's
    # copy will never be read (RQ fast-forwarded or expired past it): the head is gone.
    retry_head_at: Position | None = None
    # Highest main position already handled (delivered, sidelined or dead-lettered): MQ replays
    # after a crash at or below it are skipped. Valid for MQ reset generation `generation` only.
    handled: Position | None = None
    generation: int = 0
    # Highest main position written to RQ since the group's RQ was last drained.
    rq_max_main: Position | None = None
    # Pending RQ copies written out of main order (a main below rq_max_main: a failed head written
    # again, a message re-sidelined behind it, an unsidelined DLQ entry), reduced to the suffix
    # minima: internal and main positions both increase along the tuple. A copy read from RQ may
    # be delivered only if no pending copy written after it has an earlier main position; only
    # out-of-order copies can be such a witness, and the first entry after the read copy is the
    # smallest of them. At most one entry per out-of-order copy pending (bounded by the backlog).
    rq_late: tuple[MessageState, ...] = ()
    # DLQ positions given up by a DLQ fast-forward, as (after, upto] ranges in DLQ order (after
    # None: from the group's first dead letter). Below `dlq.c` and outside them: replayed.
    dlq_discarded: tuple[tuple[Position | None, Position], ...] = ()

    def to_json(self) -> dict[str, Any]:
        def ms(m: MessageState | None) -> list[int] | None:
            return (
                None
                if m is None
                else [m.main_topic_idx, m.main_topic_offset, m.internal_topic_idx, m.internal_topic_offset]
            )

        return {
            "rq": {"p": ms(self.rq.p), "c": ms(self.rq.c)},
            "dlq": {"p": ms(self.dlq.p), "c": ms(self.dlq.c)},
            "retry_head": None if self.retry_head is None else list(self.retry_head),
            "retry_head_at": None if self.retry_head_at is None else list(self.retry_head_at),
            "handled": None if self.handled is None else list(self.handled),
            "generation": self.generation,
            "rq_max_main": None if self.rq_max_main is None else list(self.rq_max_main),
            "rq_late": [ms(m) for m in self.rq_late],
            # only when there is one: the records of every other group stay as they were
            **(
                {"dlq_discarded": [[None if a is None else list(a), list(u)] for a, u in self.dlq_discarded]}
                if self.dlq_discarded
                else {}
            ),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GroupState:
        """The state `to_json` wrote; UndecodableState for anything else (a reader then keeps
        the group's previous state, as if this write had never landed)."""
        try:
            return cls._from_json(data)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise UndecodableState(f"group state {str(data)[:200]!r} does not decode: {exc!r}") from exc

    @classmethod
    def _from_json(cls, data: dict[str, Any]) -> GroupState:
        def ms(v: list[int] | None) -> MessageState | None:
            return None if v is None else MessageState(int(v[0]), int(v[1]), int(v[2]), int(v[3]))

        def pos(v: list[int] | None) -> Position | None:
            return None if v is None else (int(v[0]), int(v[1]))

        return cls(
            rq=QueueState(ms(data["rq"]["p"]), ms(data["rq"]["c"])),
            dlq=QueueState(ms(data["dlq"]["p"]), ms(data["dlq"]["c"])),
            retry_head=pos(data.get("retry_head")),
            retry_head_at=pos(data.get("retry_head_at")),
            handled=pos(data.get("handled")),
            generation=int(data.get("generation", 0)),
            # States written before rq_max_main existed: every RQ write counts as out of order.
            rq_max_main=pos(data["rq_max_main"]) if "rq_max_main" in data else _FAR_FUTURE,
            rq_late=tuple(m for m in (ms(v) for v in data.get("rq_late", ())) if m is not None),
            dlq_discarded=tuple((pos(a), (int(u[0]), int(u[1]))) for a, u in data.get("dlq_discarded", ())),
        )


def state_of_record(raw: bytes) -> GroupState:
    """The GroupState of a stored state record (JSON, the state under "s", as both hosts write
    it); UndecodableState for a record that does not decode."""
    try:
        value = orjson.loads(raw)
        data = value["s"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise UndecodableState(f"state record {raw[:200]!r} does not decode: {exc!r}") from exc
    return GroupState.from_json(data)


def is_blocked(state: GroupState | None, on_dlq: OnDlq) -> bool:
    return state is not None and on_dlq is OnDlq.BLOCK_GROUP and state.dlq.pending


def decide_main(state: GroupState | None, main: Position, on_dlq: OnDlq, generation: int = 0) -> Action:
    """A message read from MQ."""
    if state is None:
        return Action.DELIVER
    if state.generation == generation and state.handled is not None and main <= state.handled:
        return Action.SKIP
    if is_blocked(state, on_dlq):
        return Action.FOLLOW_TO_DLQ
    if state.rq.pending:
        return Action.SIDELINE
    return Action.DELIVER


def decide_retry(state: GroupState | None, main: Position, internal: Position, on_dlq: OnDlq) -> Action:
    """A message read from RQ (a retry, a message sidelined behind one, or an unsidelined one)."""
    if state is None:
        return Action.DELIVER
    if state.rq.c is not None and internal <= state.rq.c.internal:
        return Action.SKIP
    state = _without_lost_head(state, internal)
    if is_blocked(state, on_dlq):
        return Action.FOLLOW_TO_DLQ
    if state.retry_head is not None and main > state.retry_head:
        return Action.SIDELINE
    witness = next((m for m in state.rq_late if m.internal > internal), None)
    if witness is not None and witness.main < main:
        return Action.SIDELINE  # an earlier message of the group is still pending behind this copy
    return Action.DELIVER


def _handled(state: GroupState, main: Position, generation: int) -> GroupState:
    if state.generation != generation or state.handled is None or main > state.handled:
        return replace(state, handled=main, generation=generation)
    return state


def _without_lost_head(state: GroupState, read_at: Position) -> GroupState:
    """RQ is read in order: a copy read beyond the retry head's newest copy, in the same RQ storage
    topic, means that copy was skipped (an operator's fast-forward, or retention); the head will
    never come, so later messages stop queueing behind it (they would be sidelined again and
    again, forever). Copies in a later storage topic (fed there after a shard change) say nothing
    about the head's copy, which may be fed behind them."""
    head_at = state.retry_head_at
    if state.retry_head is None or head_at is None or read_at[0] != head_at[0] or read_at <= head_at:
        return state
    return replace(state, retry_head=None, retry_head_at=None)


def _read_from_rq(state: GroupState, read: MessageState | None) -> GroupState:
    if read is None:
        return state
    state = _without_lost_head(state, read.internal)
    rq = state.rq.consumed(read)
    if not rq.pending:
        return replace(state, rq=rq, rq_max_main=None, rq_late=())
    late = tuple(m for m in state.rq_late if m.internal > read.internal)
    return replace(state, rq=rq, rq_late=late)


def _written_to_rq(state: GroupState, written: MessageState) -> GroupState:
    """Record a copy the broker confirmed in RQ."""
    new = replace(state, rq=state.rq.produced(written))
    if new.rq_max_main is None or written.main > new.rq_max_main:
        return replace(new, rq_max_main=written.main)  # in main order: never overtakes anything
    late = [m for m in new.rq_late if m.main < written.main]  # the new copy dominates the rest
    late.append(written)
    return replace(new, rq_late=tuple(late))


def on_delivered(
    state: GroupState | None, main: Position, read_from_rq: MessageState | None = None, generation: int = 0
) -> GroupState | None:
    """The endpoint confirmed. A group that never failed keeps no state (the fast path)."""
    if state is None:
        return None
    new = _handled(_read_from_rq(state, read_from_rq), main, generation)
    if new.retry_head == main:
        new = replace(new, retry_head=None, retry_head_at=None)
    return new


def on_sidelined(
    state: GroupState | None,
    main: Position,
    written: MessageState,
    *,
    failed: bool,
    read_from_rq: MessageState | None = None,
    generation: int = 0,
) -> GroupState:
    """The broker confirmed the message in RQ at `written`; `failed` when it was a delivery failure."""
    new = _read_from_rq(state or GroupState(generation=generation), read_from_rq)
    new = _handled(_written_to_rq(new, written), main, generation)
    if failed and (new.retry_head is None or main < new.retry_head):
        new = replace(new, retry_head=main, retry_head_at=written.internal)
    elif new.retry_head == main:  # the head failed again, or was sidelined again: its newest copy
        new = replace(new, retry_head_at=written.internal)
    return new


def on_dead_lettered(
    state: GroupState | None,
    main: Position,
    written: MessageState,
    read_from_rq: MessageState | None = None,
    generation: int = 0,
) -> GroupState:
    """The broker confirmed the message in DLQ at `written`."""
    new = _read_from_rq(state or GroupState(generation=generation), read_from_rq)
    new = _handled(replace(new, dlq=new.dlq.produced(written)), main, generation)
    if new.retry_head == main:
        new = replace(new, retry_head=None, retry_head_at=None)
    return new


def on_skipped(state: GroupState | None, read_from_rq: MessageState | None = None) -> GroupState | None:
    return None if state is None else _read_from_rq(state, read_from_rq)


def on_unsidelined(
    state: GroupState, dlq_read_upto: MessageState, written_rq: Sequence[MessageState]
) -> GroupState:
    """DLQ messages up to `dlq_read_upto` were replayed into RQ, at `written_rq` (in write order)."""
    new = replace(state, dlq=state.dlq.consumed(dlq_read_upto))
    for written in written_rq:
        new = _written_to_rq(new, written)
    return new


def on_dlq_discarded(state: GroupState, upto: MessageState) -> GroupState:
    """A DLQ fast-forward gave up the group's dead letters up to `upto` (its last one below the new
    offset): consumed without replay, recorded as discarded. Nothing changes when they already
    were resolved."""
    before = state.dlq.c
    if before is not None and before.internal >= upto.internal:
        return state
    after = None if before is None else before.internal
    ranges = state.dlq_discarded
    if ranges and ranges[-1][1] == after:  # two fast-forwards in a row: one range
        ranges = (*ranges[:-1], (ranges[-1][0], upto.internal))
    else:
        ranges = (*ranges, (after, upto.internal))
    return replace(state, dlq=state.dlq.consumed(upto), dlq_discarded=ranges)


class DlqStatus(StrEnum):
    PARKED = "parked"  # still waiting: an unsideline replays it
    REPLAYED = "replayed"  # unsidelined into RQ
    DISCARDED = "discarded"  # given up by a DLQ fast-forward


def dlq_status(state: GroupState | None, at: Position) -> DlqStatus:
    """The status of the group's dead letter at DLQ position `at`: resolved once the group's DLQ
    consumed mark is at or past it, discarded when a fast-forward moved the mark over it."""
    if state is None or state.dlq.c is None or at > state.dlq.c.internal:
        return DlqStatus.PARKED
    if any((after is None or after < at) and at <= upto for after, upto in state.dlq_discarded):
        return DlqStatus.DISCARDED
    return DlqStatus.REPLAYED


def settled(state: GroupState) -> bool:
    """Nothing of the group waits in RQ and it never dead-lettered: only the committed offsets may
    still hold its state (`forgettable`). False stays false until the state changes."""
    return state.dlq.p is None and not state.rq.pending and state.retry_head is None and not state.rq_late


def forgettable(state: GroupState, main_from: Position, rq_from: Position | None) -> bool:
    """Whether dropping the group's state changes no later decision, so a group that failed once
    does not keep a state for ever. `main_from` and `rq_from` are where reading MQ (in the storage
    topic of the group's `handled` position) and RQ resumes after a crash: the committed offsets.

    It must have nothing waiting in RQ (no pending copy, no retry head) and never have
    dead-lettered: its DLQ consumption mark is what tells a replay which dead letters are resolved.
    Its two marks must be behind the committed offsets: a crash re-reads MQ and RQ only from there,
    so no record it would skip (`handled`, `rq.c`) can come again. What remains decides nothing:
    without a state, the group's later records are delivered exactly as with it."""
    if not settled(state):
        return False
    if state.handled is not None and not state.handled < main_from:
        return False
    return state.rq.c is None or (rq_from is not None and state.rq.c.internal < rq_from)
