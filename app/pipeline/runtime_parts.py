"""What the parts of a running pipeline (`PipelineRuntime`, app.pipeline.engine, and the classes
it inherits: the source's appends, the writers' runs and the operator's controls) share: a
writer's slot, the runtime's flags, and how a failure is described in its status and logs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

from app.pipeline.bulk import DeadLettering
from app.pipeline.chain import Branch
from app.pipeline.offsets import WriterState
from app.pipeline.ports import Sink
from app.pipeline.tolerance import WriteRetry

__all__ = ["WriterSlot", "describe"]


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


@dataclass
class WriterSlot:
    name: str
    branch: Branch
    sink: Sink
    state: WriterState
    task: asyncio.Task[None] | None = None
    stopped_at: float | None = None
    received: int = 0
    dead_letter: DeadLettering | None = None  # errors_tolerance all: failed messages go here
    retry: WriteRetry | None = None  # a failed bulk is replayed at once, each record tried this often

    @property
    def paused(self) -> bool:
        """Paused by the operator: not started (also after a restart: the state keeps it) until resumed."""
        return self.state.paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self.state = replace(self.state, paused=value)

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    @property
    def phase(self) -> str:
        """running, paused, failed (a failed range waits for replay) or stopped."""
        if self.running:
            return "running"
        if self.paused:
            return "paused"
        return "failed" if self.state.failed is not None else "stopped"


@dataclass
class _Flags:
    stopping: bool = False
    dirty: bool = False
    source_done: bool = False
    source_error: str | None = None
    source_refused: int = 0  # entries left out of the commit log: larger than a record may be
    events: list[str] = field(default_factory=list)
