"""The DLQ mark: where a copy taking a partition starts reading the DLQ to adopt orphaned copies.

Keys run concurrently, so the highest DLQ position the key states record is not a safe start: key
B's copy can be recorded while key A's earlier copy is not yet when the copy dies. The mark follows
the copies whose state has not landed, so an orphan is never below it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from app.consumer.engine import LibraryEngine, Record
from app.consumer.model import ConsumerSettings, Message, PermanentError
from app.consumer.orphans import DlqMark, adopt_copies, copy_at
from app.ordered.engine import Outcome
from app.ordered.memory import MemoryQueues, MemoryStateLog
from app.ordered.policy import OnDlq
from app.ordered.rules import Action, GroupState, Position, decide_main
from app.ordered.work import Work


class _Marked(MemoryStateLog):
    """States that tell the mark what landed; key "a"'s write hangs (the copy dies there)."""

    def __init__(self, mark: DlqMark) -> None:
        super().__init__()
        self.mark = mark
        self.never = asyncio.Event()
        self.hanging = asyncio.Event()

    async def put(self, partition: int, key: str, state: GroupState) -> None:
        if key == "a":
            self.hanging.set()
            await self.never.wait()
        await super().put(partition, key, state)
        if state.dlq.p is not None:
            self.mark.recorded(state.dlq.p.internal_topic_offset)


class _MarkedQueues(MemoryQueues):
    def __init__(self, mark: DlqMark) -> None:
        super().__init__()
        self.mark = mark

    async def to_dlq(self, work: Work, headers: Sequence[tuple[str, bytes]]) -> Position:
        self.mark.sending()
        at = await super().to_dlq(work, headers)
        self.mark.confirmed(at[1])
        return at


async def test_an_orphan_below_a_recorded_copy_of_another_key_is_adopted_from_the_mark() -> None:
    async def handle(message: Message) -> None:
        raise PermanentError("no")

    mark = DlqMark(0)
    states, queues = _Marked(mark), _MarkedQueues(mark)
    engine = LibraryEngine(ConsumerSettings(name="m", topic="t", bootstrap="-"), handle, states, queues)
    work_a = Work(Record("t", 0, 0, b"a", b"1"), 0, "a")
    work_b = Work(Record("t", 0, 1, b"b", b"2"), 0, "b")
    run_a = asyncio.create_task(engine.run(work_a))  # DLQ copy at 0, then its state write hangs
    await states.hanging.wait()
    assert await engine.run(work_b) is Outcome.DEAD_LETTERED  # DLQ copy at 1, state recorded
    assert mark.mark == 0
    run_a.cancel()  # the copy dies before a's state write
    await asyncio.gather(run_a, return_exceptions=True)

    survived = MemoryStateLog()
    survived.states = dict(states.states)
    dlq = [copy_at("dlq", o, list(h.items())) for o, (_, h) in enumerate(queues.dlq[0])]
    from_states = 1 + max(s.dlq.p.internal_topic_offset for s in survived.states.values() if s.dlq.p)
    assert from_states == 2  # reading from there would leave a's copy at 0 an orphan
    assert await adopt_copies(survived, 0, [c for c in dlq[mark.mark :] if c is not None]) == 1
    assert decide_main(survived.get(0, "a"), (0, 0), OnDlq.BLOCK_GROUP) is Action.SKIP


@given(st.lists(st.tuples(st.sampled_from(["send", "confirm", "fail", "record"]), st.integers(0, 5))))
def test_the_mark_is_never_above_a_copy_whose_state_has_not_landed(steps: list[tuple[str, int]]) -> None:
    mark = DlqMark(3)
    sending = 0
    next_offset = 3
    unrecorded: set[int] = set()
    for step, pick in steps:
        if step == "send":
            mark.sending()
            sending += 1
        elif step == "confirm" and sending:
            mark.confirmed(next_offset)
            unrecorded.add(next_offset)
            next_offset += 1
            sending -= 1
        elif step == "fail" and sending:
            mark.failed()
            sending -= 1
        elif step == "record" and unrecorded:
            done = sorted(unrecorded)[pick % len(unrecorded)]
            mark.recorded(done)
            unrecorded.discard(done)
        at = mark.mark
        if sending:
            assert at is None  # a copy on its way has no offset yet: nothing can be promised
        else:
            assert at is not None and at >= 3
            assert all(at <= o for o in unrecorded)
            assert at == (min(unrecorded) if unrecorded else next_offset)
