"""A commit-log append the broker refuses must not lose source messages: the composite reader goes
back to the positions the log confirmed and reads the refused entries again. Before, the reader's
consumer kept its own position: with one refused append, 20 of 50 messages never reached the log
and the saved reader position moved past them. The same holds when a batch fails after part of its
records are in the log."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from app.composite.store import MetadataStore
from app.crashpoints import armed
from app.kafka.broker import broker_for
from app.pipeline.engine import PipelineRuntime
from app.pipeline.kafka_log import KafkaCommitLog, read_log_range
from app.pipeline.memory import MemoryStateStore
from app.pipeline.offsets import ReaderState
from app.pipeline.readers import CompositeSource
from app.settings import Settings
from tests.integration.pipeline.support import composite_with
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.integration

MESSAGES = 50


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    await async_wait_until(predicate, timeout_s, what, poll_s=0.1)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("point", "max_record_bytes"),
    [
        ("pipeline.log.append", 1_048_576),  # refused before any record is produced
        # Records of at most 300 bytes (a batch of 10 is several): the batch fails once its first
        # record is in the log, the others in flight or not yet sent.
        ("pipeline.log.record_confirmed", 300),
    ],
)
def test_every_source_message_reaches_the_log_after_a_refused_append(
    stack: Settings, metadata: MetadataStore, unique: str, point: str, max_record_bytes: int
) -> None:
    name = f"refused-{unique}"
    composite_with(stack, metadata, name, 2, MESSAGES, groups=7)
    log = KafkaCommitLog(broker_for(stack), f"refused-log-{unique}", max_record_bytes)
    log.ensure_topic()
    source = CompositeSource(stack, {"topic": name}, batch_size=10, wait_s=0.2)

    async def scenario() -> dict[str, int]:
        engine = PipelineRuntime(
            name=name,
            log_=log,
            store=MemoryStateStore(),
            source=source,
            writers={},
            writer_states={},
            reader_states={},
            batch_size=10,
            source_retry_s=0.1,
        )
        with armed(point, nth=2, action="raise") as trigger:
            await engine.start()

            async def caught_up() -> bool:
                state = engine.readers.get(name)
                return state is not None and sum(int(v) for v in state.position.values()) >= MESSAGES

            await wait_for(caught_up, 60, "the reader to confirm every source message")
            assert trigger.fired, f"{point} fired at its second hit"
        positions = {k: int(v) for k, v in engine.readers[name].position.items()}
        await engine.stop()
        await log.close()
        return positions

    positions = asyncio.run(scenario())
    entries = read_log_range(broker_for(stack), log.topic, 0, 10_000)
    ids = sorted({entry.value.data["id"] for entry in entries}, key=lambda s: int(s[1:]))
    assert ids == [f"m{i}" for i in range(MESSAGES)], "every source message is in the log"
    if point == "pipeline.log.record_confirmed":
        assert len(entries) > MESSAGES, "the failed batch stayed in the log and was appended again"
    assert sum(positions.values()) == MESSAGES


@pytest.mark.timeout(180)
def test_a_restart_right_after_a_refused_append_still_brings_every_message_to_the_log(
    stack: Settings, metadata: MetadataStore, unique: str
) -> None:
    """A batch fails once its first record is in the log while later batches are in flight; the
    pipeline stops before its reader tries again, and a new one starts from the flushed reader
    states. Catching up from the log must not move the reader past the entries that never landed."""
    name = f"restart-{unique}"
    composite_with(stack, metadata, name, 2, MESSAGES, groups=7)
    log = KafkaCommitLog(broker_for(stack), f"restart-log-{unique}", 300)
    log.ensure_topic()
    store = MemoryStateStore()

    def runtime(readers: dict[str, ReaderState], retry_s: float) -> PipelineRuntime:
        return PipelineRuntime(
            name=name,
            log_=log,
            store=store,
            source=CompositeSource(stack, {"topic": name}, batch_size=10, wait_s=0.2),
            writers={},
            writer_states={},
            reader_states=readers,
            batch_size=10,
            source_retry_s=retry_s,
            appends_in_flight=4,
        )

    async def scenario() -> int:
        first = runtime({}, retry_s=120)  # the retry would come long after the stop
        with armed("pipeline.log.record_confirmed", nth=2, action="raise") as trigger:
            await first.start()
            await wait_for(lambda: _true(first.flags.source_error is not None), 60, "the refused append")
            assert trigger.fired
        await first.stop()
        again = runtime(dict(first.readers), retry_s=0.1)
        await again.start()

        async def caught_up() -> bool:
            state = again.readers.get(name)
            return state is not None and sum(int(v) for v in state.position.values()) >= MESSAGES

        await wait_for(caught_up, 60, "the restarted reader to confirm every source message")
        await again.stop()
        await log.close()
        return sum(int(v) for v in again.readers[name].position.values())

    assert asyncio.run(scenario()) == MESSAGES
    entries = read_log_range(broker_for(stack), log.topic, 0, 10_000)
    ids = sorted({entry.value.data["id"] for entry in entries}, key=lambda s: int(s[1:]))
    assert ids == [f"m{i}" for i in range(MESSAGES)], "every source message is in the log"
    # Every entry carries its append order through the log's records (the hs-seq header), which
    # the restarted pipeline's catch-up followed; the first append's entries start it at 1.
    assert all(entry.seq > 0 for entry in entries) and entries[0].seq == 1


async def _true(value: bool) -> bool:
    return value
