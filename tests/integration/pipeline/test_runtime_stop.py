"""A stopped pipeline runtime leaves no thread behind, even while something still refers to it: its
state store's sending thread and control producer, and the commit log's producer, end with it.
Before, they ended only when the objects were collected, and the pipeline process freezes its heap
out of the collector (bench/pipeline_mysql.py lost a Python thread and seven librdkafka threads a
run, and each later run in the process got slower)."""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator, Mapping

import pytest

from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.broker import broker_for
from app.pipeline.chain import Branch
from app.pipeline.engine import PipelineRuntime
from app.pipeline.kafka_log import KafkaCommitLog
from app.pipeline.model import Message, Mode, NewEntry, Op
from app.pipeline.offsets import ReaderState
from app.pipeline.state import ControlChannel, KafkaStateStore
from app.settings import Settings
from tests.support.waiting import async_wait_until
from tests.unit.pipeline.helpers import RecordingSink

pytestmark = pytest.mark.integration


class ListSource:
    """The given entries, once."""

    def __init__(self, entries: list[NewEntry]) -> None:
        self.entries = entries

    async def read(self, resume: Mapping[str, ReaderState]) -> AsyncIterator[list[NewEntry]]:
        yield self.entries

    async def close(self) -> None:
        return None


def own_threads() -> list[str]:
    """Python threads other than the event loop's default executor (which grows on demand, up to
    its bound, and keeps its threads)."""
    return sorted(t.name for t in threading.enumerate() if not t.name.startswith("asyncio_"))


def os_threads() -> int:
    """OS threads of this process, the default executor's left out."""
    return len(os.listdir("/proc/self/task")) - (threading.active_count() - len(own_threads()))


@pytest.mark.timeout(120)
async def test_start_and_stop_leave_no_threads(stack: Settings, unique: str) -> None:
    control = f"stop-control-{unique}"
    KafkaAdmin(stack.bootstrap).create([TopicSpec(control, 1)])

    kept: list[object] = []  # stopped runtimes stay referenced: their threads must end all the same

    async def run_once(round_: int) -> None:
        log = KafkaCommitLog(broker_for(stack), f"stop-log-{unique}-{round_}")
        log.ensure_topic()
        entries = [
            NewEntry(Message(Op.INSERT, 0, "ns", {"seq": i}), Mode.SYNC, {"line": i + 1}) for i in range(20)
        ]
        sink = RecordingSink()
        runtime = PipelineRuntime(
            name=f"stop-{unique}",
            log_=log,
            store=KafkaStateStore(ControlChannel(stack.bootstrap, control)),
            source=ListSource(entries),
            writers={"w": (Branch("w"), sink)},
            writer_states={},
            reader_states={},
            batch_size=10,
            flush_interval_s=0.1,
        )
        await runtime.start()
        await async_wait_until(
            lambda: len(sink.received) == 20, 30, "the writer to write every entry", poll_s=0.05
        )
        await runtime.stop(10)
        await log.close()
        kept.append(runtime)

    await run_once(0)  # the first run loads what every run shares (the default executor's threads...)
    python_threads, threads = own_threads(), os_threads()
    for round_ in range(1, 4):
        await run_once(round_)
    assert own_threads() == python_threads
    await async_wait_until(
        lambda: os_threads() <= threads, 10, f"OS threads back to {threads} (now {os_threads()})"
    )
