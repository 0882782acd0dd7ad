"""`errors_tolerance: all`: a message a transform or the sink's conversion fails on goes to the
dead-letter queue with its context and the writer goes on; `none` stops as the seed says; a write
the sink refuses stops the writer either way; a crash after the DLQ confirmed leaves nothing lost."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, cast

import orjson
import pytest

from app.crashpoints import armed
from app.errors import ConfigError
from app.pipeline.chain import Branch, NamespaceFilter, TransformStep
from app.pipeline.definition import ComponentSpec, WriterSpec, definition_from_mapping
from app.pipeline.engine import PipelineRuntime
from app.pipeline.errors import InvalidDefinition
from app.pipeline.memory import MemoryCommitLog, MemoryDeadLetters, MemoryStateStore
from app.pipeline.model import Message, Mode, NewEntry, Op, decode_entry
from app.pipeline.offsets import ReaderState, WriterState
from app.pipeline.ports import CheckedSink, PipelinedSink
from app.pipeline.tolerance import ErrorsTolerance, dead_letter_context

from .helpers import RecordingSink, wait_for

ENTRIES = 30
POISON = {3, 11, 12, 29}  # the transform raises on these seqs
HEADERS = {
    "hs-pipeline",
    "hs-writer",
    "hs-stage",
    "hs-step",
    "hs-log-offset",
    "hs-source-position",
    "hs-error-class",
    "hs-error",
    "hs-failed-ms",
}


def refuse_poison(message: Message) -> Message:
    if message.data.get("poison"):
        raise ValueError(f"poison {message.data['seq']}")
    return message


STEP = TransformStep("transforms.py:refuse_poison", refuse_poison)


async def fill(poison: set[int] = POISON, count: int = ENTRIES) -> MemoryCommitLog:
    log = MemoryCommitLog()
    await log.append(
        [
            NewEntry(
                Message(Op.INSERT, 1000 + i, "AB"[i % 2], {"seq": i, "poison": i in poison}),
                Mode.SYNC,
                {"line": i + 1},
                f"d{i}",
            )
            for i in range(count)
        ]
    )
    return log


class CheckingStore(MemoryStateStore):
    """Records every flush whose writer offset passes a poison entry the DLQ does not hold yet."""

    def __init__(self, dlq: MemoryDeadLetters, poison: set[int]) -> None:
        super().__init__()
        self.dlq = dlq
        self.poison = poison
        self.violations: list[int] = []

    async def close(self) -> None:
        return None

    async def save(self, writers: Mapping[str, WriterState], readers: Mapping[str, ReaderState]) -> None:
        offset = writers["db"].offset
        lettered = {int(dead_letter_context(d.headers)["hs-log-offset"]) for d in self.dlq.letters}
        if any(p <= offset and p not in lettered for p in self.poison):
            self.violations.append(offset)
        await super().save(writers, readers)


def runtime(
    log: MemoryCommitLog,
    store: MemoryStateStore,
    sink: Any,
    dlq: MemoryDeadLetters | None,
    tolerance: ErrorsTolerance = ErrorsTolerance.ALL,
    batch_size: int = 8,
) -> PipelineRuntime:
    return PipelineRuntime(
        name="tolerant",
        log_=log,
        store=store,
        source=None,
        writers={"db": (Branch("db", (NamespaceFilter(), STEP)), sink)},
        writer_states=dict(store.writers),
        reader_states={},
        batch_size=batch_size,
        batch_wait_s=0.01,
        flush_interval_s=0.005,
        errors_tolerance={"db": tolerance},
        dead_letters=dlq,
    )


def offsets(dlq: MemoryDeadLetters) -> list[int]:
    return [int(dead_letter_context(d.headers)["hs-log-offset"]) for d in dlq.letters]


async def test_all_dead_letters_the_failing_transforms_with_context_and_delivers_the_rest() -> None:
    log, dlq = await fill(), MemoryDeadLetters()
    store = CheckingStore(dlq, POISON)
    sink = RecordingSink()
    run = runtime(log, store, sink, dlq)
    await run.start()
    await wait_for(lambda: run.slots["db"].state.offset == ENTRIES - 1)
    await run.stop()

    assert sink.received == [i for i in range(ENTRIES) if i not in POISON]
    assert offsets(dlq) == sorted(POISON)
    assert store.violations == [] and store.writers["db"].offset == ENTRIES - 1
    assert store.writers["db"].failed is None
    assert run.status()["writers"]["db"]["dead_lettered"] == len(POISON)
    assert dlq.closed
    for letter, seq in zip(dlq.letters, sorted(POISON), strict=True):
        context = dead_letter_context(letter.headers)
        assert set(context) == HEADERS
        assert context["hs-pipeline"] == "tolerant" and context["hs-writer"] == "db"
        assert context["hs-stage"] == "transform" and context["hs-step"] == "transforms.py:refuse_poison"
        assert context["hs-log-offset"] == str(seq)
        assert orjson.loads(context["hs-source-position"]) == {"line": seq + 1}
        assert context["hs-error-class"] == "ValueError" and context["hs-error"] == f"poison {seq}"
        assert int(context["hs-failed-ms"]) > 0
        # The original commit-log record: its key and its encoded entry.
        assert letter.key == f"{'AB'[seq % 2]}\x00d{seq}".encode()
        original = decode_entry(seq, letter.value)
        assert original.value == log.entries[seq].value
        assert original.position == {"line": seq + 1} and original.mode is Mode.SYNC


async def test_none_stops_the_writer_at_the_first_failing_bulk_as_before() -> None:
    log = await fill()
    store, sink = MemoryStateStore(), RecordingSink()
    run = runtime(log, store, sink, None, ErrorsTolerance.NONE)
    await run.start()
    await wait_for(lambda: not run.slots["db"].running)
    assert sink.received == [] and run.slots["db"].state.failed is not None  # the bulk 0-7 failed
    await run.resume()  # the failed range one at a time, up to the poison
    await wait_for(lambda: not run.slots["db"].running and run.slots["db"].state.offset == 2)
    await run.stop()

    assert sink.received == [0, 1, 2]
    state = store.writers["db"]
    assert state.offset == 2
    assert state.failed is not None and state.failed.failed_offset == 3
    assert "ValueError: poison 3" in run.flags.events[-1]


class PreparingSink:
    """A PipelinedSink whose statement building (prepare) fails on a value it cannot convert."""

    def __init__(self) -> None:
        self.written: list[int] = []

    async def prepare(self, messages: Sequence[Message]) -> list[int]:
        for m in messages:
            if m.data.get("nan"):
                raise ValueError("nan can not be used with MySQL")
        return [int(m.data["seq"]) for m in messages]

    async def write_prepared(self, prepared: list[int], stream: object = None) -> None:
        self.written.extend(prepared)

    async def write(self, messages: Sequence[Message]) -> None:
        await self.write_prepared(await self.prepare(messages))

    async def close(self) -> None:
        return None


class EncodingSink(RecordingSink):
    """A sink that encodes inside `write` and can check the encoding beforehand (CheckedSink)."""

    def check(self, messages: Sequence[Message]) -> None:
        for m in messages:
            orjson.dumps(m.data)

    async def write(self, messages: Sequence[Message]) -> None:
        self.check(messages)
        await super().write(messages)


def mark_unconvertible(message: Message) -> Message:
    seq = message.data["seq"]
    if seq % 7 == 5:
        return message.with_data({**message.data, "nan": True, "big": 2**70})
    return message


@pytest.mark.parametrize("sink_type", [PreparingSink, EncodingSink])
async def test_all_dead_letters_what_the_sink_cannot_convert(sink_type: type[Any]) -> None:
    log, dlq = await fill(poison={8}), MemoryDeadLetters()
    sink = sink_type()
    assert isinstance(sink, PipelinedSink | CheckedSink)
    run = PipelineRuntime(
        name="tolerant",
        log_=log,
        store=MemoryStateStore(),
        source=None,
        writers={"db": (Branch("db", (STEP, TransformStep("mark_unconvertible", mark_unconvertible))), sink)},
        writer_states={},
        reader_states={},
        batch_size=8,
        batch_wait_s=0.01,
        errors_tolerance={"db": ErrorsTolerance.ALL},
        dead_letters=dlq,
    )
    await run.start()
    await wait_for(lambda: run.slots["db"].state.offset == ENTRIES - 1)
    await run.stop()

    unconvertible = [i for i in range(ENTRIES) if i % 7 == 5]
    written = sink.written if isinstance(sink, PreparingSink) else cast(EncodingSink, sink).received
    assert written == [i for i in range(ENTRIES) if i != 8 and i not in unconvertible]
    assert offsets(dlq) == sorted([8, *unconvertible])
    stages = {int(c["hs-log-offset"]): c for c in map(dead_letter_context, (d.headers for d in dlq.letters))}
    assert stages[8]["hs-stage"] == "transform"
    for seq in unconvertible:
        assert stages[seq]["hs-stage"] == "convert" and "hs-step" not in stages[seq]
        # the original entry, not the transformed message the sink could not convert
        assert decode_entry(seq, dlq.letters[offsets(dlq).index(seq)].value).value.data.get("nan") is None


async def test_all_still_stops_when_the_sink_refuses_a_write() -> None:
    """Bulk-write failures keep the one-at-a-time replay; a replayed message the sink refuses stops
    the writer as with none (Kafka Connect's `all` tolerates conversion and transform errors only)."""
    log, dlq = await fill(poison={2}, count=10), MemoryDeadLetters()
    store = MemoryStateStore()
    sink = RecordingSink(fail_when=lambda seqs: 5 in seqs)
    run = runtime(log, store, sink, dlq, batch_size=10)
    await run.start()
    await wait_for(lambda: not run.slots["db"].running)
    assert sink.received == [] and run.slots["db"].state.failed is not None  # the bulk 0-9 was refused
    await run.resume()
    await wait_for(lambda: not run.slots["db"].running and run.slots["db"].state.offset == 4)
    await run.stop()

    assert sink.received == [0, 1, 3, 4]
    state = store.writers["db"]
    assert state.failed is not None and state.failed.failed_offset == 5
    assert "sink refused [5]" in state.failed.error
    # 2 was dead-lettered with the bulk that then failed, and again when the range was replayed.
    assert offsets(dlq) == [2, 2]


async def _crash(run: PipelineRuntime) -> None:
    """kill -9: every task stops where it is; nothing more is flushed."""
    tasks = [s.task for s in run.slots.values() if s.task is not None]
    tasks += [t for t in (run._flusher, run._source_task) if t is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("nth", [1, 2, 3])
@pytest.mark.parametrize("sink_type", [RecordingSink, PreparingSink])
async def test_a_crash_at_the_dlq_point_loses_nothing(nth: int, sink_type: type[Any]) -> None:
    log, dlq = await fill(), MemoryDeadLetters()
    store = CheckingStore(dlq, POISON)
    sink = sink_type()
    run = runtime(log, store, sink, dlq, batch_size=4)
    with armed("pipeline.dlq.confirmed", nth=nth) as trigger:
        await run.start()
        await wait_for(lambda: trigger.fired)
        await _crash(run)
    assert store.writers.get("db", WriterState()).offset < sorted(POISON)[nth - 1]

    again = runtime(log, store, sink, dlq, batch_size=4)
    await again.start()
    await wait_for(lambda: again.slots["db"].state.offset == ENTRIES - 1)
    await again.stop()

    assert store.violations == []
    assert set(offsets(dlq)) == POISON  # each at least once; the one the crash cut may come twice
    written = sink.written if isinstance(sink, PreparingSink) else sink.received
    valid = [i for i in range(ENTRIES) if i not in POISON]
    assert set(written) == set(valid)
    assert sorted(set(written[written.index(valid[-1]) :])) == [valid[-1]]  # nothing after the end
    assert list(dict.fromkeys(reversed(written)))[::-1] == valid  # each's last delivery in order


def _writer(raw: dict[str, Any]) -> WriterSpec:
    definition = definition_from_mapping(
        {"name": "p", "reader": {"type": "jsonl", "path": "in.jsonl"}, "writers": [raw]}
    )
    return definition.writers[0]


def test_the_definition_takes_errors_tolerance_per_writer() -> None:
    plain = _writer({"name": "w", "type": "jsonl", "path": "out.jsonl"})
    assert plain.errors_tolerance is ErrorsTolerance.NONE
    tolerant = _writer({"name": "w", "type": "jsonl", "path": "out.jsonl", "errors_tolerance": "all"})
    assert tolerant.errors_tolerance is ErrorsTolerance.ALL
    assert "errors_tolerance" not in tolerant.component.options  # not handed to the sink
    with pytest.raises(InvalidDefinition, match=r"writers\.w\.errors_tolerance: must be 'none' or 'all'"):
        _writer({"name": "w", "type": "jsonl", "path": "out.jsonl", "errors_tolerance": "some"})
    # A Python definition may give it as text; other values are refused the same way.
    spec = WriterSpec("w", ComponentSpec("jsonl", {"path": "x"}), Branch("w"), "all")  # type: ignore[arg-type]
    assert spec.errors_tolerance is ErrorsTolerance.ALL
    with pytest.raises(InvalidDefinition, match="writer w: errors_tolerance"):
        WriterSpec("w", ComponentSpec("jsonl", {"path": "x"}), Branch("w"), True)  # type: ignore[arg-type]


async def test_a_tolerant_writer_needs_a_dead_letter_queue() -> None:
    with pytest.raises(ConfigError, match="no dead-letter queue"):
        runtime(await fill(), MemoryStateStore(), RecordingSink(), None)
