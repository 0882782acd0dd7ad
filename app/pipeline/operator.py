"""The operator's controls of a running pipeline (Transporter "operator intervention", Kafka Connect's
pause/resume): the answers the pipeline process's HTTP API serves (app/pipeline/web.py), as the
models of app/pipeline/api_models.py.

Bad input raises InvalidInput (400), an unknown writer UnknownWriter (404), a step on a running
writer WriterBusy (409), a pipeline still starting PipelineNotRunning (503).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, TypeVar

from app.errors import InvalidInput
from app.kafka.broker import broker_for
from app.pipeline.api_models import (
    CommitLog,
    LogPage,
    MarkOffset,
    PausedAll,
    PipelineOffsets,
    PipelineStatus,
    PipelineSummary,
    ResumedAll,
    WriterAnswer,
    WriterChanged,
    WriterStepped,
    WriterSummary,
    WriterView,
    entry_view,
    failed_view,
    reader_view,
    writer_state_view,
)
from app.pipeline.engine import PipelineRuntime, WriterSlot
from app.pipeline.errors import PipelineNotRunning, WriterBusy
from app.pipeline.kafka_log import read_log_range
from app.pipeline.service import PipelineHost
from app.web.responses import parse_body

__all__ = [
    "DEFAULT_LOG_RANGE",
    "MAX_LOG_RANGE",
    "PipelineOperator",
    "log_range",
    "mark_offset",
    "writer_view",
]

MAX_LOG_RANGE = 1000  # entries one log view may return
DEFAULT_LOG_RANGE = 100
A = TypeVar("A", bound=WriterAnswer)


def writer_view(slot: WriterSlot, end_offset: int) -> WriterView:
    state = slot.state
    return WriterView(
        state=slot.phase,  # type: ignore[arg-type]  # one of Phase's values
        offset=state.offset,
        lag=max(end_offset - state.next_offset, 0),
        stopped=not slot.running,
        last_error=None if state.failed is None else state.failed.error,
        failed=failed_view(state.failed),
        namespaces=dict(state.namespaces),
        received=slot.received,
        dead_lettered=slot.dead_letter.count if slot.dead_letter is not None else 0,
    )


def _int(raw: str, name: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise InvalidInput(f"{name}={raw[:40]!r} is not an integer") from None


def log_range(query: Mapping[str, str]) -> tuple[int, int]:
    """`from` (default 0) and `to` (inclusive, default from + 99), at most MAX_LOG_RANGE entries."""
    first = _int(query.get("from", "0"), "from")
    last = _int(query["to"], "to") if "to" in query else first + DEFAULT_LOG_RANGE - 1
    if first < 0 or last < first:
        raise InvalidInput(f"from={first} to={last}: need 0 <= from <= to")
    if last - first + 1 > MAX_LOG_RANGE:
        raise InvalidInput(f"from={first} to={last}: at most {MAX_LOG_RANGE} entries per request")
    return first, last


def mark_offset(body: Any, end_offset: int) -> int:
    """The offset of a mark request body {"offset": N}, with -1 <= N < the log's end."""
    offset = parse_body(MarkOffset, body, 'a JSON object {"offset": N}').offset
    if not -1 <= offset < end_offset:
        raise InvalidInput(f"offset {offset} is outside -1..{end_offset - 1} of the commit log")
    return offset


class PipelineOperator:
    """One pipeline of this process, as the HTTP API sees it."""

    def __init__(self, host: PipelineHost) -> None:
        self.host = host
        self.name = host.definition.name
        # One change at a time: a resume during a step's write would run the writer beside it.
        self._changing = asyncio.Lock()

    def _runtime(self) -> PipelineRuntime:
        runtime = self.host.runtime
        if runtime is None:
            raise PipelineNotRunning(f"pipeline {self.name} is not running yet (or stopping); retry")
        return runtime

    async def _end(self, runtime: PipelineRuntime) -> int:
        return await runtime.log.end_offset()

    def summary(self) -> PipelineSummary:
        runtime = self.host.runtime
        if runtime is None:
            writers = [WriterSummary(name=w.name, state="starting") for w in self.host.definition.writers]
            return PipelineSummary(name=self.name, state="starting", writers=writers)
        return PipelineSummary(
            name=self.name,
            state="running",
            writers=[
                WriterSummary(name=n, state=s.phase, offset=s.state.offset)  # type: ignore[arg-type]
                for n, s in runtime.slots.items()
            ],
        )

    async def status(self) -> PipelineStatus:
        runtime = self._runtime()
        end = await self._end(runtime)
        return PipelineStatus(
            pipeline=self.name,
            state="running",
            commit_log=CommitLog(topic=self.host.topics.log, end_offset=end),
            reader_done=runtime.flags.source_done,
            reader_error=runtime.flags.source_error,
            reader_refused=runtime.flags.source_refused,
            reader={ns: reader_view(r) for ns, r in sorted(runtime.readers.items())},
            writers={n: writer_view(s, end) for n, s in sorted(runtime.slots.items())},
        )

    async def offsets(self) -> PipelineOffsets:
        runtime = self._runtime()
        return PipelineOffsets(
            pipeline=self.name,
            end_offset=await self._end(runtime),
            writers={n: writer_state_view(s.state) for n, s in sorted(runtime.slots.items())},
            readers={ns: reader_view(r) for ns, r in sorted(runtime.readers.items())},
        )

    async def log(self, first: int, last: int) -> LogPage:
        runtime = self._runtime()
        settings = self.host.settings
        entries = await asyncio.to_thread(
            read_log_range, broker_for(settings), self.host.topics.log, first, last
        )
        return LogPage(
            pipeline=self.name,
            first=first,
            last=last,
            end_offset=await self._end(runtime),
            entries=[entry_view(e) for e in entries],
        )

    async def _writer_answer(self, runtime: PipelineRuntime, writer: str, kind: type[A], **extra: Any) -> A:
        view = writer_view(runtime.slot(writer), await self._end(runtime))
        return kind(pipeline=self.name, writer=writer, **dict(view), **extra)

    async def pause(self, writer: str) -> WriterChanged:
        runtime = self._runtime()
        async with self._changing:
            changed = await runtime.pause(writer)
        return await self._writer_answer(runtime, writer, WriterChanged, changed=changed)

    async def resume(self, writer: str) -> WriterChanged:
        runtime = self._runtime()
        runtime.slot(writer)  # UnknownWriter before anything changes
        async with self._changing:
            changed = bool(await runtime.resume(writer))
        return await self._writer_answer(runtime, writer, WriterChanged, changed=changed)

    async def pause_all(self) -> PausedAll:
        runtime = self._runtime()
        names = list(runtime.slots)
        async with self._changing:
            paused = await asyncio.gather(*(runtime.pause(n) for n in names))
        return PausedAll(pipeline=self.name, paused=[n for n, p in zip(names, paused, strict=True) if p])

    async def resume_all(self) -> ResumedAll:
        runtime = self._runtime()
        async with self._changing:
            resumed = await runtime.resume(None)
        return ResumedAll(pipeline=self.name, resumed=resumed)

    async def step(self, writer: str) -> WriterStepped:
        runtime = self._runtime()
        async with self._changing:
            if runtime.slot(writer).running:
                raise WriterBusy(
                    f"writer {writer} of pipeline {self.name} is running: pause it before a step"
                )
            result = await runtime.step(writer)
        return await self._writer_answer(
            runtime, writer, WriterStepped, stepped=result["stepped"], ok=result.get("ok", True)
        )

    async def mark(self, writer: str, body: Any) -> WriterAnswer:
        runtime = self._runtime()
        runtime.slot(writer)
        offset = mark_offset(body, await self._end(runtime))
        async with self._changing:
            await runtime.mark(writer, offset)
        return await self._writer_answer(runtime, writer, WriterAnswer)
