"""Caught-up writers take confirmed entries from memory (LogTail); otherwise they read the log.
The offsets they save still cover only entries the log and the sink both confirmed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence

from app.pipeline.chain import Branch, TransformStep
from app.pipeline.engine import PipelineRuntime
from app.pipeline.memory import MemoryCommitLog, MemoryCursor, MemoryStateStore
from app.pipeline.model import LogEntry, Message, Mode, NewEntry, Op
from app.pipeline.offsets import ReaderState, WriterState
from app.pipeline.tail import LogTail, TailCursor
from tests.support.waiting import run_until_idle

from .helpers import RecordingSink, wait_for


def entries(first: int, count: int) -> list[LogEntry]:
    return [
        LogEntry(o, 0, Mode.SYNC, "ns", Message(Op.INSERT, 0, "ns", {"seq": o}))
        for o in range(first, first + count)
    ]


class CountingLog(MemoryCommitLog):
    """Counts the entries writers read back from the log; `refusing` refuses appends when set."""

    def __init__(self) -> None:
        super().__init__()
        self.read_back = 0
        self.refusing = False

    async def prepare_append(self) -> None:
        return None

    async def start_append(self, new: Sequence[NewEntry]) -> asyncio.Future[list[int]]:
        if self.refusing:
            raise OSError("log refused the append")
        return await super().start_append(new)

    def cursor(self, start: int) -> MemoryCursor:
        log = self

        class Counting(MemoryCursor):
            async def next_batch(self, max_count: int, wait_s: float) -> list[LogEntry]:
                batch = await super().next_batch(max_count, wait_s)
                log.read_back += len(batch)
                return batch

        return Counting(self, start)


class ListSource:
    """Batches of seqs from a queue (None ends the source)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[list[int] | None] = asyncio.Queue()

    async def read(self, resume: Mapping[str, ReaderState]) -> AsyncIterator[list[NewEntry]]:
        while (seqs := await self.queue.get()) is not None:
            yield [NewEntry(Message(Op.INSERT, 0, "ns", {"seq": s}), Mode.SYNC, {"seq": s}) for s in seqs]

    async def close(self) -> None:
        return None


class WatchedTail(LogTail):
    """Counts the writers waiting on it: such a writer is caught up and reads what comes next from
    memory (its cursor is not waiting on the log)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.waiting = 0

    async def wait(self, timeout_s: float) -> None:
        self.waiting += 1
        try:
            await super().wait(timeout_s)
        finally:
            self.waiting -= 1


def pipeline(
    log: CountingLog,
    source: ListSource,
    writers: dict[str, tuple[Branch, RecordingSink]],
    **states: WriterState,
) -> PipelineRuntime:
    runtime = PipelineRuntime(
        name="tail",
        log_=log,
        store=MemoryStateStore(),
        source=source,
        writers=writers,
        writer_states=states,
        reader_states={},
        batch_size=10,
        batch_wait_s=0.02,
        flush_interval_s=0.05,
    )
    runtime.tail = WatchedTail(runtime.tail.capacity)
    return runtime


# -- LogTail / TailCursor -------------------------------------------------------------


def test_the_tail_holds_only_consecutive_confirmed_offsets() -> None:
    tail = LogTail(capacity=4)
    assert tail.read(0, 10) is None  # empty: read the log
    tail.add(entries(5, 3))
    assert [e.offset for e in tail.read(6, 10) or []] == [6, 7]
    assert tail.read(8, 10) == []  # caught up
    assert tail.read(4, 10) is None  # before the tail
    tail.add(entries(10, 2))  # 8 and 9 came from elsewhere: the tail starts again at 10
    assert tail.read(8, 10) is None
    assert [e.offset for e in tail.read(10, 10) or []] == [10, 11]
    tail.add(entries(12, 8))  # capacity 4: the oldest are dropped, at least 4 kept
    assert tail.read(10, 10) is None
    assert [e.offset for e in tail.read(16, 10) or []] == [16, 17, 18, 19]


async def test_a_cursor_reads_the_log_until_it_reaches_the_tail_then_memory() -> None:
    log = CountingLog()
    await log.append([NewEntry(Message(Op.INSERT, 0, "ns", {"seq": s}), Mode.SYNC) for s in range(6)])
    tail = LogTail(capacity=100)
    tail.add(log.entries[3:])  # offsets 3..5 are in memory too
    cursor = TailCursor(log, tail, 0)
    seen: list[int] = []
    while len(seen) < 6:
        seen += [e.offset for e in await cursor.next_batch(3, 0.01)]
    await cursor.close()
    assert seen == [0, 1, 2, 3, 4, 5]
    assert log.read_back == 3 and cursor.from_tail == 3


# -- engine ---------------------------------------------------------------------------


async def caught_up(runtime: PipelineRuntime, offset: int, on_tail: bool = True) -> None:
    """Every writer confirmed `offset`, and (`on_tail`) each one fed from the tail waits on it for
    more: a cursor still waiting on the log would read what comes next from there (it returns after
    batch_wait_s, then waits on the tail)."""
    tail = runtime.tail
    assert isinstance(tail, WatchedTail)
    from_tail = sum(not s.branch.transforms for s in runtime.slots.values()) if on_tail else 0
    await wait_for(
        lambda: all(s.state.offset == offset for s in runtime.slots.values()) and tail.waiting >= from_tail,
        what=f"every writer at {offset}, {from_tail} of them waiting on the tail",
    )


async def test_a_caught_up_writer_gets_entries_only_after_the_log_confirmed_them() -> None:
    log, source, sink = CountingLog(), ListSource(), RecordingSink()
    runtime = pipeline(log, source, {"db": (Branch("db"), sink)})
    await runtime.start()
    try:
        await source.queue.put(list(range(5)))
        await caught_up(runtime, 4)
        read_back = log.read_back
        log.hold()
        await source.queue.put(list(range(5, 10)))
        await wait_for(lambda: len(log.pending) == 1, what="the append of 5..9 handed over")
        await run_until_idle()
        assert sink.received == list(range(5)) and runtime.slots["db"].state.offset == 4  # not confirmed
        log.release()
        for batch in (list(range(10, 25)), list(range(25, 30))):
            await source.queue.put(batch)
        await caught_up(runtime, 29)
    finally:
        await source.queue.put(None)
        await runtime.stop(5)
    assert sink.received == list(range(30))
    assert log.read_back == read_back  # every entry after the first batch came from memory


async def test_a_writer_whose_sink_failed_stops_before_the_bulk_and_replays_it() -> None:
    log, source = CountingLog(), ListSource()
    sink = RecordingSink(fail_when=lambda seqs: 3 in seqs and len(seqs) > 1)
    runtime = pipeline(log, source, {"db": (Branch("db"), sink)})
    await runtime.start()
    try:
        await source.queue.put(list(range(6)))
        await wait_for(lambda: not runtime.slots["db"].running)
        assert runtime.slots["db"].state.offset == -1  # the sink confirmed nothing
        await runtime.resume("db")
        await wait_for(lambda: runtime.slots["db"].state.offset == 5)
    finally:
        await source.queue.put(None)
        await runtime.stop(5)
    assert sink.received == list(range(6))


async def test_a_refused_append_never_reaches_a_writer() -> None:
    log, source, sink = CountingLog(), ListSource(), RecordingSink()
    runtime = pipeline(log, source, {"db": (Branch("db"), sink)})
    runtime.source_retry_s = 0.01
    await runtime.start()
    try:
        log.refusing = True
        await source.queue.put([0, 1])
        await wait_for(lambda: runtime.flags.source_error is not None)
        log.refusing = False
        await source.queue.put([2])
        await caught_up(runtime, 0)
    finally:
        await source.queue.put(None)
        await runtime.stop(5)
    assert sink.received == [2]


async def test_a_writer_with_transforms_reads_the_log() -> None:
    log, source, plain, transformed = CountingLog(), ListSource(), RecordingSink(), RecordingSink()
    step = TransformStep("same", lambda m: m)
    writers = {"a": (Branch("a"), plain), "b": (Branch("b", (step,)), transformed)}
    runtime = pipeline(log, source, writers)
    await runtime.start()
    try:
        await source.queue.put(list(range(8)))
        await caught_up(runtime, 7)
        read_back = log.read_back
        await source.queue.put(list(range(8, 12)))
        await caught_up(runtime, 11)
    finally:
        await source.queue.put(None)
        await runtime.stop(5)
    assert plain.received == transformed.received == list(range(12))
    assert log.read_back == read_back + 4  # writer b only


async def test_a_writer_behind_reads_the_log_then_joins_the_tail() -> None:
    log, source, sink = CountingLog(), ListSource(), RecordingSink()
    await log.append([NewEntry(Message(Op.INSERT, 0, "ns", {"seq": s}), Mode.SYNC) for s in range(4)])
    runtime = pipeline(log, source, {"db": (Branch("db"), sink)}, db=WriterState(offset=1))
    await runtime.start()
    try:
        await caught_up(runtime, 3, on_tail=False)  # the tail holds nothing yet: it reads the log
        await source.queue.put([4, 5, 6])
        await caught_up(runtime, 6)
        read_back = log.read_back
        await source.queue.put([7, 8])
        await caught_up(runtime, 8)
    finally:
        await source.queue.put(None)
        await runtime.stop(5)
    assert sink.received == list(range(2, 9))
    assert log.read_back == read_back  # 7 and 8 from memory
