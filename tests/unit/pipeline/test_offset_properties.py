"""Property tests for the per-writer offset rules (Transporter "Message Guarantees" and "Message Failures").

The engine runs over the in-memory log and store with scripted sinks: any sequence of bulk results,
failures and crashes (a crash drops everything not yet flushed), then a healthy clean run.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.pipeline.chain import Branch, NamespaceFilter
from app.pipeline.engine import PipelineRuntime
from app.pipeline.memory import MemoryCommitLog, MemoryStateStore
from app.pipeline.model import LogEntry, Message, Mode, NewEntry, Op
from app.pipeline.offsets import NOTHING, ReaderState, WriterState, compact, log_resume_offset
from tests.support.waiting import async_wait_until

FILTERS = {"c0": "^[AB]$", "c1": ".*"}  # c0 sees only A and B; C counts as acknowledged for it


class ScriptedSink:
    """Fails the write calls its script says; a failed write writes nothing (an atomic bulk)."""

    def __init__(self) -> None:
        self.script: list[bool] = []
        self.written: list[int] = []  # every seq ever written, in order (the target's history)

    async def write(self, messages: Sequence[Message]) -> None:
        if self.script and not self.script.pop(0):
            raise RuntimeError("scripted failure")
        self.written.extend(int(m.data["seq"]) for m in messages)

    async def close(self) -> None:
        return None


class CheckingStore(MemoryStateStore):
    """Records every flush in which a writer's offset passes what its sink confirmed (the engine
    catches errors of interval flushes, so violations are collected, not raised)."""

    def __init__(self, sinks: Mapping[str, ScriptedSink], passing: Mapping[str, set[int]]) -> None:
        super().__init__()
        self.sinks = sinks
        self.passing = passing
        self.violations: list[str] = []

    async def close(self) -> None:
        return None

    async def save(self, writers: Mapping[str, WriterState], readers: Mapping[str, ReaderState]) -> None:
        for name, state in writers.items():
            confirmed = set(self.sinks[name].written)
            unconfirmed = [
                o for o in range(state.offset + 1) if o in self.passing[name] and o not in confirmed
            ]
            if unconfirmed:
                self.violations.append(f"{name} offset {state.offset} passes unconfirmed {unconfirmed}")
        await super().save(writers, readers)


async def _crash(run: PipelineRuntime) -> None:
    """kill -9: every task stops where it is; nothing more is flushed."""
    tasks = [s.task for s in run.slots.values() if s.task is not None]
    tasks += [t for t in (run._flusher, run._source_task) if t is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _settled(run: PipelineRuntime, end: int) -> None:
    await async_wait_until(
        lambda: not any(s.running and s.state.offset < end - 1 for s in run.slots.values()),
        5,
        "every running writer at the log's end",
        poll_s=0.002,
    )


def _runtime(
    log: MemoryCommitLog, store: CheckingStore, sinks: Mapping[str, ScriptedSink], flush_s: float
) -> PipelineRuntime:
    return PipelineRuntime(
        name="prop",
        log_=log,
        store=store,
        source=None,
        writers={n: (Branch(n, (NamespaceFilter(FILTERS[n]),)), sink) for n, sink in sinks.items()},
        writer_states=dict(store.writers),
        reader_states={},
        batch_size=4,
        batch_wait_s=0.002,
        flush_interval_s=flush_s,
    )


phase = st.tuples(
    st.lists(st.booleans(), max_size=6),  # c0's write results, in call order (then all succeed)
    st.lists(st.booleans(), max_size=6),  # c1's
    st.sampled_from(["crash", "clean"]),
    st.sampled_from([0.001, 1000.0]),  # offsets flushed often, or (crash) never before the kill
    st.text("ABC", max_size=6),  # entries appended before this phase
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.text("ABC", min_size=1, max_size=24), phases=st.lists(phase, min_size=1, max_size=4))
def test_offsets_never_pass_the_sink_and_restarts_redeliver_in_order(
    keys: str, phases: list[tuple[list[bool], list[bool], str, float, str]]
) -> None:
    asyncio.run(_scenario(keys, phases))


async def _scenario(keys: str, phases: list[tuple[list[bool], list[bool], str, float, str]]) -> None:
    log = MemoryCommitLog()
    namespaces: list[str] = []

    async def append(more: str) -> None:
        first = len(namespaces)
        namespaces.extend(more)
        await log.append(
            [NewEntry(Message(Op.INSERT, i, k, {"seq": i}), Mode.SYNC) for i, k in enumerate(more, first)]
        )

    await append(keys)
    sinks = {"c0": ScriptedSink(), "c1": ScriptedSink()}
    passing: dict[str, set[int]] = {"c0": set(), "c1": set()}
    store = CheckingStore(sinks, passing)
    for script0, script1, ending, flush_s, more in [*phases, ([], [], "clean", 0.001, "")]:
        await append(more)
        for name in sinks:
            passing[name] = {i for i, k in enumerate(namespaces) if re.search(FILTERS[name], k)}
        sinks["c0"].script, sinks["c1"].script = list(script0), list(script1)
        start = {n: store.writers.get(n, WriterState()).offset for n in sinks}
        before = {n: len(s.written) for n, s in sinks.items()}
        run = _runtime(log, store, sinks, flush_s)
        await run.start()
        await _settled(run, len(namespaces))
        reached = {n: s.state.offset for n, s in run.slots.items()}
        await (_crash(run) if ending == "crash" else run.stop())
        for name, sink in sinks.items():
            # Every message after the committed offset comes again, exactly in order, nothing skipped.
            delivered = sink.written[before[name] :]
            expected = sorted(o for o in passing[name] if start[name] < o <= reached[name])
            assert delivered == expected, (name, start[name], reached[name], delivered)
            saved = store.writers.get(name, WriterState()).offset
            assert start[name] <= saved <= reached[name]
            if ending == "clean":
                assert saved == reached[name]
    assert store.violations == []
    end = len(namespaces)
    for name, sink in sinks.items():
        assert store.writers[name].offset == end - 1 and store.writers[name].failed is None
        assert set(sink.written) == passing[name]  # no loss; duplicates only from redelivery


writer_states = st.builds(WriterState, offset=st.integers(NOTHING, 10_000))


@given(st.dictionaries(st.text("abc", min_size=1, max_size=3), writer_states, min_size=1))
def test_the_log_is_read_again_from_the_lowest_writer_offset(writers: dict[str, WriterState]) -> None:
    resume = log_resume_offset(writers)
    assert resume == min(s.offset for s in writers.values()) + 1 >= 0
    assert all(s.next_offset >= resume for s in writers.values())


@given(
    offset=st.integers(NOTHING, 100),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("confirm"), st.integers(0, 200)),
            st.tuples(st.just("fail"), st.integers(1, 20)),
            st.tuples(st.just("replayed"), st.integers(0, 200)),
            st.tuples(st.just("replay_failed"), st.integers(0, 200)),
        ),
        max_size=20,
    ),
)
def test_a_failure_never_moves_the_offset_and_replay_covers_the_failed_range(
    offset: int, ops: list[tuple[str, int]]
) -> None:
    state = WriterState(offset)
    for op, value in ops:
        before = state
        if op == "confirm":
            state = state.confirmed(value)
            assert state.offset == max(before.offset, value)
        elif op == "fail":
            first = state.next_offset
            state = state.bulk_failed(first, first + value, "boom")
            assert state.offset == before.offset
            assert list(state.replay_range()) == list(range(first, first + value + 1))
        elif op == "replayed":
            state = state.replayed(value)
            assert state.offset == max(before.offset, value)
            if before.failed is not None and value >= before.failed.last:
                assert state.failed is None
        else:
            state = state.replay_failed(value, "boom")
            assert state.offset == before.offset and state.failed is not None
            assert state.failed.failed_offset == value
        assert state.offset >= before.offset
        assert WriterState.from_json(state.to_json()) == state


@given(st.text("ABC", max_size=40), st.integers(0, 45))
def test_compaction_keeps_everything_from_the_floor_and_the_latest_per_key_below(
    keys: str, floor: int
) -> None:
    entries = [LogEntry(i, i, Mode.SYNC, k, Message(Op.INSERT, i, k, {"seq": i})) for i, k in enumerate(keys)]
    kept = compact(entries, floor)
    assert [e.offset for e in kept] == sorted(e.offset for e in kept)
    assert [e for e in entries if e.offset >= floor] == [e for e in kept if e.offset >= floor]
    below = [e for e in kept if e.offset < floor]
    latest = {k: max(i for i, key in enumerate(keys[:floor]) if key == k) for k in set(keys[:floor])}
    assert sorted(e.offset for e in below) == sorted(latest.values())
