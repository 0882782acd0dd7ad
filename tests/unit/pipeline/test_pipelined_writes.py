"""A PipelinedSink gets the next bulk while it still writes the previous one; offsets still advance
only past confirmed bulks, oldest first, and a failed bulk stops every later one of its stream."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from app.pipeline.chain import Branch, NamespaceFilter, TransformStep
from app.pipeline.engine import PipelineRuntime
from app.pipeline.memory import MemoryCommitLog, MemoryStateStore
from app.pipeline.model import Message
from app.pipeline.offsets import ReaderState, WriterState
from app.pipeline.ports import PipelinedSink

from .helpers import fill_log, wait_for


class OrderedSink:
    """Writes prepared bulks one at a time in call order (like MysqlSink's connection thread); once a
    bulk of a stream failed, the later ones of that stream fail unwritten."""

    def __init__(self, fail_seq: int | None = None, write_s: float = 0.005) -> None:
        self.fail_seq = fail_seq
        self.write_s = write_s
        self.written: list[int] = []
        self.handed_over = 0  # bulks handed over and not written yet, at most
        self.most_handed_over = 0
        self._turn = asyncio.Lock()
        self._failed_stream: object = None

    async def prepare(self, messages: Sequence[Message]) -> list[int]:
        return [int(m.data["seq"]) for m in messages]

    async def write_prepared(self, prepared: list[int], stream: object = None) -> None:
        # Shielded: like a write already queued in a sink's thread, cancelling the caller does not stop it.
        await asyncio.shield(self._write_in_turn(prepared, stream))

    async def _write_in_turn(self, prepared: list[int], stream: object) -> None:
        self.handed_over += 1
        self.most_handed_over = max(self.most_handed_over, self.handed_over)
        try:
            async with self._turn:
                await asyncio.sleep(self.write_s)
                if stream is not None and stream is self._failed_stream:
                    raise RuntimeError("not written: an earlier bulk failed")
                if self.fail_seq in prepared:
                    self._failed_stream = stream
                    raise RuntimeError(f"refused {prepared}")
                self.written.extend(prepared)
        finally:
            self.handed_over -= 1

    async def write(self, messages: Sequence[Message]) -> None:
        await self.write_prepared(await self.prepare(messages))

    async def close(self) -> None:
        return None


class ConfirmedOnlyStore(MemoryStateStore):
    """Records every flush whose writer offset passes an entry the sink has not written."""

    def __init__(self, sink: OrderedSink) -> None:
        super().__init__()
        self.sink = sink
        self.violations: list[int] = []

    async def close(self) -> None:
        return None

    async def save(self, writers: Mapping[str, WriterState], readers: Mapping[str, ReaderState]) -> None:
        offset = writers["db"].offset
        if any(seq not in self.sink.written for seq in range(offset + 1)):
            self.violations.append(offset)
        await super().save(writers, readers)


def runtime(log: MemoryCommitLog, store: MemoryStateStore, sink: Any, branch: Branch) -> PipelineRuntime:
    return PipelineRuntime(
        name="pipelined",
        log_=log,
        store=store,
        source=None,
        writers={"db": (branch, sink)},
        writer_states=dict(store.writers),
        reader_states={},
        batch_size=4,
        batch_wait_s=0.02,
        flush_interval_s=0.003,
    )


async def test_two_bulks_in_flight_and_offsets_only_past_written_entries() -> None:
    log = await fill_log("AB" * 40)
    sink = OrderedSink()
    store = ConfirmedOnlyStore(sink)
    run = runtime(log, store, sink, Branch("db"))
    assert isinstance(sink, PipelinedSink)
    await run.start()
    await wait_for(lambda: run.slots["db"].state.offset == 79)
    await run.stop()

    assert sink.written == list(range(80))
    assert sink.most_handed_over == 2
    assert store.violations == []
    assert store.writers["db"].offset == 79
    assert store.writers["db"].namespaces == {"A": 78, "B": 79}


async def test_a_failed_bulk_stops_the_one_handed_over_after_it() -> None:
    log = await fill_log("A" * 40)
    sink = OrderedSink(fail_seq=13)
    store = ConfirmedOnlyStore(sink)
    run = runtime(log, store, sink, Branch("db"))
    await run.start()
    await wait_for(lambda: not run.slots["db"].running)
    await run.stop()

    assert sink.written == list(range(12))  # bulk 12-15 failed; 16-19 was handed over, not written
    state = store.writers["db"]
    assert state.offset == 11
    assert state.failed is not None and (state.failed.first, state.failed.last) == (12, 15)
    assert store.violations == []

    # Restarted with the sink healthy: 12-15 one at a time, then bulks again.
    sink.fail_seq = None
    again = runtime(log, store, sink, Branch("db"))
    await again.start()
    await wait_for(lambda: again.slots["db"].state.offset == 39)
    await again.stop()
    assert sink.written == list(range(40))
    assert store.violations == []


async def test_a_failing_transform_fails_its_bulk_after_the_previous_one_is_confirmed() -> None:
    def refuse_seven(message: Message) -> Message:
        if message.data["seq"] == 7:
            raise ValueError("seven")
        return message

    log = await fill_log("A" * 12)
    sink = OrderedSink(write_s=0.02)
    store = ConfirmedOnlyStore(sink)
    branch = Branch("db", (NamespaceFilter(), TransformStep("refuse_seven", refuse_seven)))
    assert not branch.passes_all
    run = runtime(log, store, sink, branch)
    await run.start()
    await wait_for(lambda: not run.slots["db"].running)
    await run.stop()

    assert sink.written == [0, 1, 2, 3]
    state = store.writers["db"]
    assert state.offset == 3
    assert state.failed is not None and (state.failed.first, state.failed.last) == (4, 7)
    assert "ValueError: seven" in run.flags.events[-1]


def test_only_catch_all_filters_pass_everything() -> None:
    assert Branch("db").passes_all
    assert Branch("db", (NamespaceFilter(""), NamespaceFilter(".*"))).passes_all
    assert Branch("db", ()).passes_all
    assert not Branch("db", (NamespaceFilter("^A$"),)).passes_all
