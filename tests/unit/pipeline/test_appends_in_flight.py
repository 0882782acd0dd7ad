"""Several commit-log appends in flight: each batch's reader states and tail entries move strictly in
append order, only once that batch and every earlier one are confirmed. After a failed append the
later ones move nothing, and the reader resumes after the last confirmed position: the log may hold
duplicates, never a gap."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence

from app.pipeline.chain import Branch
from app.pipeline.engine import PipelineRuntime
from app.pipeline.memory import MemoryCommitLog, MemoryCursor, MemoryStateStore
from app.pipeline.model import LogEntry, Message, Mode, NewEntry, Op
from app.pipeline.offsets import ReaderState
from app.pipeline.tail import LogTail
from tests.support.waiting import run_until_idle

from .helpers import RecordingSink, wait_for
from .test_log_tail import CountingLog


def new_entry(seq: int) -> NewEntry:
    return NewEntry(Message(Op.INSERT, 0, "ns", {"seq": seq}), Mode.SYNC, {"seq": seq})


class SeqSource:
    """Seqs 0..total-1 in batches of `size`, from after the resume position (recorded per read)."""

    def __init__(self, total: int, size: int) -> None:
        self.total, self.size = total, size
        self.resumes: list[ReaderState | None] = []

    async def read(self, resume: Mapping[str, ReaderState]) -> AsyncIterator[list[NewEntry]]:
        state = resume.get("ns")
        self.resumes.append(state)
        start = int(state.position["seq"]) + 1 if state is not None else 0
        for first in range(start, self.total, self.size):
            yield [new_entry(s) for s in range(first, min(first + self.size, self.total))]

    async def close(self) -> None:
        return None


class RecordingTail(LogTail):
    def __init__(self) -> None:
        super().__init__(1000)
        self.added: list[list[int]] = []

    def add(self, entries: Sequence[LogEntry]) -> None:
        self.added.append([e.offset for e in entries])
        super().add(entries)


def pipeline(
    log: object,
    source: SeqSource,
    sink: RecordingSink | None = None,
    readers: Mapping[str, ReaderState] | None = None,
) -> PipelineRuntime:
    runtime = PipelineRuntime(
        name="inflight",
        log_=log,  # type: ignore[arg-type]
        store=MemoryStateStore(),
        source=source,
        writers={"db": (Branch("db"), sink)} if sink is not None else {},
        writer_states={},
        reader_states=dict(readers or {}),
        batch_size=10,
        batch_wait_s=0.02,
        flush_interval_s=0.05,
        source_retry_s=0.01,
        appends_in_flight=4,
    )
    runtime.tail = RecordingTail()
    return runtime


def reader_at(runtime: PipelineRuntime) -> tuple[int, int] | None:
    """The reader's (seq position, log offset), None before any confirmed append."""
    state = runtime.readers.get("ns")
    return None if state is None else (int(state.position["seq"]), state.log_offset)


def added(runtime: PipelineRuntime) -> list[list[int]]:
    assert isinstance(runtime.tail, RecordingTail)
    return runtime.tail.added


def log_seqs(log: MemoryCommitLog) -> list[int]:
    return [int(e.value.data["seq"]) for e in log.entries]


async def test_appends_overlap_and_move_the_reader_in_append_order() -> None:
    log, source, sink = MemoryCommitLog(), SeqSource(8, 2), RecordingSink()
    log.hold()
    runtime = pipeline(log, source, sink)
    await runtime.start()
    try:
        await wait_for(lambda: len(log.pending) == 4)  # four batches handed over, none confirmed
        await run_until_idle()
        assert reader_at(runtime) is None and added(runtime) == [] and sink.received == []
        log.confirm(1)
        await wait_for(lambda: reader_at(runtime) == (1, 1))
        assert added(runtime) == [[0, 1]]
        log.confirm(2)
        await wait_for(lambda: reader_at(runtime) == (5, 5))
        assert added(runtime) == [[0, 1], [2, 3], [4, 5]]
        log.release()
        await wait_for(lambda: runtime.flags.source_done and sink.received == list(range(8)))
    finally:
        await runtime.stop(5)
    assert reader_at(runtime) == (7, 7) and source.resumes == [None]
    assert log_seqs(log) == list(range(8))


async def test_a_failed_append_stops_every_later_one_and_the_reader_resumes_after_the_last_confirmed() -> (
    None
):
    log, source, sink = MemoryCommitLog(), SeqSource(8, 2), RecordingSink()
    log.hold()
    runtime = pipeline(log, source, sink)
    await runtime.start()
    try:
        await wait_for(lambda: len(log.pending) == 4)
        log.refuse(OSError("refused"), index=1)  # batch 1 (seqs 2, 3) fails while batch 0 is pending
        await run_until_idle()
        assert reader_at(runtime) is None and added(runtime) == []  # batch 0 is not confirmed yet
        log.confirm()  # batch 0, then batches 2 and 3: they reach the log after the refused one
        await wait_for(lambda: len(source.resumes) == 2)
        assert source.resumes[1] == ReaderState(Mode.SYNC, {"seq": 1}, 1, seq=2)  # after batch 0 only
        assert added(runtime) == [[0, 1]]  # batches 2 and 3 never reached the tail
        assert log_seqs(log) == [0, 1, 4, 5, 6, 7]
        await wait_for(lambda: len(log.pending) == 3)  # the reader reads 2..7 again
        log.release()
        await wait_for(lambda: runtime.flags.source_done and reader_at(runtime) == (7, 11))
        await wait_for(lambda: set(sink.received) == set(range(8)))
    finally:
        await runtime.stop(5)
    assert runtime.flags.source_error is None
    assert log_seqs(log) == [0, 1, 4, 5, 6, 7, 2, 3, 4, 5, 6, 7]  # duplicates, no gap
    assert added(runtime) == [[0, 1], [6, 7], [8, 9], [10, 11]]
    assert sink.received == log_seqs(log)  # the writer read 4..7 from the log, then the tail


async def test_a_restart_after_a_refused_append_does_not_move_the_reader_past_the_hole() -> None:
    """Batch 1 is refused while batches 2 and 3 are confirmed after it; the pipeline stops before its
    reader read batch 1 again and starts afresh from its flushed reader state. Catching up from the
    log must stop at the hole: before, it moved the reader past batches 2 and 3, and batch 1's
    entries never reached the log or any writer."""
    log, source = MemoryCommitLog(), SeqSource(8, 2)
    log.hold()
    runtime = pipeline(log, source)
    await runtime.start()
    try:
        await wait_for(lambda: len(log.pending) == 4)
        log.refuse(OSError("refused"), index=1)
        log.confirm()  # batch 0, then batches 2 and 3, after the hole
        await wait_for(lambda: len(source.resumes) == 2)  # the reader reads 2..7 again, held
    finally:
        await runtime.stop(5)
    assert log_seqs(log) == [0, 1, 4, 5, 6, 7]
    flushed = dict(runtime.readers)
    assert flushed["ns"].position == {"seq": 1}

    log.holding = False
    log.pending.clear()  # the stopped process's appends in flight are gone with it
    again_source, sink = SeqSource(8, 2), RecordingSink()
    again = pipeline(log, again_source, sink, readers=flushed)
    await again.start()
    try:
        await wait_for(lambda: again.flags.source_done and set(sink.received) == set(range(8)))
    finally:
        await again.stop(5)
    assert again_source.resumes[0] == flushed["ns"]  # resumed before the hole, not past it
    assert set(log_seqs(log)) == set(range(8))


class RefusingOnce(MemoryCommitLog):
    """Refuses the `nth` batch when it is handed over (as the crash point pipeline.log.append does)."""

    def __init__(self, nth: int) -> None:
        super().__init__()
        self.nth, self.calls = nth, 0

    async def start_append(self, entries: Sequence[NewEntry]) -> asyncio.Future[list[int]]:
        self.calls += 1
        if self.calls == self.nth:
            raise OSError("refused at hand-over")
        return await super().start_append(entries)


async def test_appends_started_before_a_refused_one_still_move_the_reader() -> None:
    log, source = RefusingOnce(nth=3), SeqSource(8, 2)
    log.hold()
    runtime = pipeline(log, source)
    await runtime.start()
    try:
        await wait_for(lambda: runtime.flags.source_error is not None)
        assert len(log.pending) == 2 and reader_at(runtime) is None
        log.release()  # the two earlier batches are confirmed: the reader resumes after them
        await wait_for(lambda: runtime.flags.source_done)
    finally:
        await runtime.stop(5)
    assert source.resumes == [None, ReaderState(Mode.SYNC, {"seq": 3}, 3, seq=4)]
    assert log_seqs(log) == list(range(8)) and reader_at(runtime) == (7, 7)


class UnreachableAtFirst(MemoryCommitLog):
    """Cannot get ready to append the first `failures` times (the broker is not up yet)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def prepare_append(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise OSError("broker not reachable")


async def test_a_log_not_ready_at_start_is_tried_again() -> None:
    """Before, the reader's task ended on the first failure to get ready and the pipeline read nothing."""
    log, source = UnreachableAtFirst(failures=2), SeqSource(8, 2)
    runtime = pipeline(log, source)
    await runtime.start()
    try:
        await wait_for(lambda: runtime.flags.source_done)
    finally:
        await runtime.stop(5)
    assert log.failures == 0 and log_seqs(log) == list(range(8)) and reader_at(runtime) == (7, 7)


class ReorderingLog:
    """Offsets given in hand-over order (as Kafka's produce order); the test confirms in any order."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self.confirmations: list[tuple[asyncio.Future[list[int]], list[int]]] = []

    async def prepare_append(self) -> None:
        return None

    async def start_append(self, batch: Sequence[NewEntry]) -> asyncio.Future[list[int]]:
        offsets = list(range(len(self.entries), len(self.entries) + len(batch)))
        for new, offset in zip(batch, offsets, strict=True):
            msg = new.message
            self.entries.append(LogEntry(offset, 0, new.mode, msg.namespace, msg, new.position, new.doc_key))
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self.confirmations.append((future, offsets))
        return future

    async def end_offset(self) -> int:
        return len(self.entries)

    def cursor(self, start: int) -> MemoryCursor:
        raise AssertionError("no writer reads this log")


async def test_a_later_confirmation_waits_for_the_earlier_ones() -> None:
    log, source = ReorderingLog(), SeqSource(6, 2)
    runtime = pipeline(log, source)
    await runtime.start()
    try:
        await wait_for(lambda: len(log.confirmations) == 3)
        for future, offsets in reversed(log.confirmations[1:]):
            future.set_result(offsets)
        await run_until_idle()
        assert reader_at(runtime) is None and added(runtime) == []
        future, offsets = log.confirmations[0]
        future.set_result(offsets)
        await wait_for(lambda: runtime.flags.source_done)
    finally:
        await runtime.stop(5)
    assert added(runtime) == [[0, 1], [2, 3], [4, 5]] and reader_at(runtime) == (5, 5)


# -- the reader stays within the tail of the most advanced tail-fed writer -------------------


class GatedSink(RecordingSink):
    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def write(self, messages: Sequence[Message]) -> None:
        await self.gate.wait()
        await super().write(messages)


def gated_pipeline(log: CountingLog, source: SeqSource, sinks: dict[str, RecordingSink]) -> PipelineRuntime:
    return PipelineRuntime(
        name="inflight",
        log_=log,
        store=MemoryStateStore(),
        source=source,
        writers={name: (Branch(name), sink) for name, sink in sinks.items()},
        writer_states={},
        reader_states={},
        batch_size=500,  # tail capacity 4,000; 4 appends in flight: the reader stays within 2,000
        batch_wait_s=0.02,
        flush_interval_s=0.05,
    )


async def test_the_reader_waits_for_a_writer_that_would_fall_off_the_tail() -> None:
    log, source, sink = CountingLog(), SeqSource(10_000, 500), GatedSink()
    runtime = gated_pipeline(log, source, {"db": sink})
    await runtime.start()
    try:
        await wait_for(lambda: len(log.entries) >= 2_000)
        await run_until_idle()  # without the limit the reader would append all 10,000 meanwhile
        assert len(log.entries) <= 4_000 and not runtime.flags.source_done  # the writer confirmed nothing
        read_back = log.read_back
        sink.gate.set()
        await wait_for(lambda: runtime.flags.source_done and sink.received == list(range(10_000)))
    finally:
        await runtime.stop(5)
    assert log.read_back == read_back  # every entry after the writer's first read came from memory


async def test_a_slow_writer_does_not_hold_back_the_reader_or_a_faster_writer() -> None:
    log, source, slow, fast = CountingLog(), SeqSource(10_000, 500), GatedSink(), RecordingSink()
    runtime = gated_pipeline(log, source, {"slow": slow, "fast": fast})
    await runtime.start()
    try:
        await wait_for(lambda: runtime.flags.source_done and fast.received == list(range(10_000)))
        assert slow.received == []
        slow.gate.set()  # it fell off the tail: it reads the log
        await wait_for(lambda: slow.received == list(range(10_000)))
    finally:
        await runtime.stop(5)
    assert log.read_back > 0
