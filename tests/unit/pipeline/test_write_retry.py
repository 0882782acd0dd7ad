"""A writer's `retry`: a failed bulk is replayed at once, one record at a time, each record's write
tried `attempts` times with backoff before errors_tolerance decides: a sink that recovers loses and
stops nothing; one that keeps refusing a record stops the writer at it (`none`) or dead-letters it
with stage `write` and goes on (`all`)."""

from __future__ import annotations

from typing import Any

import pytest

from app.pipeline.chain import Branch, NamespaceFilter
from app.pipeline.definition import definition_from_mapping
from app.pipeline.engine import PipelineRuntime
from app.pipeline.errors import InvalidDefinition
from app.pipeline.memory import MemoryCommitLog, MemoryDeadLetters, MemoryStateStore
from app.pipeline.operator import writer_view
from app.pipeline.tolerance import ErrorsTolerance, WriteRetry, dead_letter_context

from .helpers import RecordingSink, fill_log, wait_for

FAST = WriteRetry(attempts=3, min_backoff_s=0.001, max_backoff_s=0.004)


class FlakySink(RecordingSink):
    """Refuses every call holding `seq` the first `times` times, then takes it."""

    def __init__(self, seq: int, times: int) -> None:
        super().__init__(fail_when=self._fails)
        self.seq, self.left, self.refusals = seq, times, 0

    def _fails(self, seqs: list[int]) -> bool:
        if self.seq in seqs and self.left > 0:
            self.left -= 1
            self.refusals += 1
            return True
        return False


def runtime(
    log: MemoryCommitLog,
    store: MemoryStateStore,
    sink: Any,
    tolerance: ErrorsTolerance = ErrorsTolerance.NONE,
    dlq: MemoryDeadLetters | None = None,
) -> PipelineRuntime:
    return PipelineRuntime(
        name="retrying",
        log_=log,
        store=store,
        source=None,
        writers={"db": (Branch("db", (NamespaceFilter(),)), sink)},
        writer_states={},
        reader_states={},
        batch_size=4,
        batch_wait_s=0.01,
        flush_interval_s=0.005,
        errors_tolerance={"db": tolerance},
        dead_letters=dlq,
        write_retries={"db": FAST},
    )


async def test_a_sink_that_recovers_within_the_retries_stops_nothing_and_loses_nothing() -> None:
    log, store = await fill_log("A" * 12), MemoryStateStore()
    sink = FlakySink(seq=5, times=2)  # the bulk 4-7 fails, then the replay's first try of 5
    run = runtime(log, store, sink)
    await run.start()
    await wait_for(lambda: sorted(set(sink.received)) == list(range(12)), what="every record written")
    assert run.slots["db"].running and run.slots["db"].state.failed is None
    await run.stop()
    assert sink.received == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert sink.refusals == 2 and store.writers["db"].offset == 11


async def test_without_tolerance_a_record_refused_every_try_stops_the_writer_at_it() -> None:
    log, store = await fill_log("A" * 12), MemoryStateStore()
    sink = FlakySink(seq=5, times=100)
    run = runtime(log, store, sink)
    await run.start()
    await wait_for(lambda: not run.slots["db"].running, what="the writer stopped")
    await run.stop()
    assert sink.received == [0, 1, 2, 3, 4]
    failed = store.writers["db"].failed
    assert failed is not None and failed.failed_offset == 5 and "failed 3 times" in run.flags.events[-1]
    assert sink.refusals == 1 + FAST.attempts  # the bulk, then each try of the record alone


async def test_with_tolerance_all_a_record_refused_every_try_is_dead_lettered_and_the_rest_written() -> None:
    log, store, dlq = await fill_log("A" * 12), MemoryStateStore(), MemoryDeadLetters()
    sink = FlakySink(seq=5, times=100)
    run = runtime(log, store, sink, ErrorsTolerance.ALL, dlq)
    await run.start()
    await wait_for(lambda: 11 in sink.received, what="the records after the refused one")
    assert run.slots["db"].running
    await run.stop()
    assert sink.received == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    assert writer_view(run.slots["db"], 12).dead_lettered == 1  # in the status API and /metrics
    [letter] = dlq.letters
    context = dead_letter_context(letter.headers)
    assert (context["hs-stage"], context["hs-log-offset"]) == ("write", "5")
    assert "sink refused [5]" in context["hs-error"]


def test_backoff_doubles_up_to_its_maximum() -> None:
    retry = WriteRetry(attempts=6, min_backoff_s=0.5, max_backoff_s=3.0)
    assert [retry.backoff_s(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_the_definition_takes_a_retry_per_writer_and_refuses_a_bad_one() -> None:
    raw: dict[str, Any] = {
        "name": "p",
        "reader": {"type": "jsonl", "path": "in.jsonl"},
        "writers": [{"name": "out", "type": "jsonl", "path": "o.jsonl", "retry": {"attempts": 4}}],
    }
    [writer] = definition_from_mapping(raw).writers
    assert writer.retry == WriteRetry(attempts=4) and "retry" not in writer.component.options
    raw["writers"][0]["retry"] = {"attempts": 0, "min_backoff_s": 5, "max_backoff_s": 1}
    with pytest.raises(InvalidDefinition) as refused:
        definition_from_mapping(raw)
    assert any("attempts" in p for p in refused.value.problems)
