"""Recording and failing sinks plus a commit-log builder for the engine tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.pipeline.chain import Branch
from app.pipeline.engine import PipelineRuntime
from app.pipeline.memory import MemoryCommitLog
from app.pipeline.model import Message, Mode, NewEntry, Op
from tests.support.waiting import async_wait_until

__all__ = ["RecordingSink", "fill_log", "wait_for"]


class RecordingSink:
    """Records every write call (the seqs in it); `fail_when(seqs)` decides whether a call fails."""

    def __init__(self, fail_when: Callable[[list[int]], bool] = lambda _seqs: False) -> None:
        self.calls: list[list[int]] = []
        self.fail_when = fail_when

    @property
    def received(self) -> list[int]:
        return [seq for call in self.calls for seq in call]

    async def write(self, messages: Sequence[Message]) -> None:
        seqs = [int(m.data["seq"]) for m in messages]
        if self.fail_when(seqs):
            raise RuntimeError(f"sink refused {seqs}")
        self.calls.append(seqs)

    async def close(self) -> None:
        return None


async def fill_log(keys: str) -> MemoryCommitLog:
    log = MemoryCommitLog()
    await log.append(
        [NewEntry(Message(Op.INSERT, 1000 + i, key, {"seq": i}), Mode.SYNC) for i, key in enumerate(keys)]
    )
    return log


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0, what: str = "condition") -> None:
    """Until `predicate` holds (checked every 10 ms: the engine's loops run on short timers)."""
    await async_wait_until(predicate, timeout_s, what, poll_s=0.01)


def branches(**sinks: RecordingSink) -> dict[str, tuple[Branch, RecordingSink]]:
    return {name: (Branch(name), sink) for name, sink in sinks.items()}


def runtime(
    log: MemoryCommitLog, store: object, sinks: dict[str, RecordingSink], states: dict[str, object]
) -> PipelineRuntime:
    return PipelineRuntime(
        name="seed",
        log_=log,
        store=store,  # type: ignore[arg-type]
        source=None,
        writers=branches(**sinks),
        writer_states=states,  # type: ignore[arg-type]
        reader_states={},
        batch_size=100,
        batch_wait_s=0.02,
        flush_interval_s=0.05,
    )
