"""The operator's controls of a running pipeline (seed 004 "operator intervention", Kafka Connect's
pause/resume) as JSON-ready answers: what the pipeline process's HTTP API serves (app/pipeline/web.py).

Answers are dicts of snake_case names, put on the wire by app/pipeline/api_models.py. Bad input
raises InvalidInput (400), an unknown writer UnknownWriter (404), a step on a running writer
WriterBusy (409), a pipeline still starting PipelineNotRunning (503).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from app.errors import InvalidInput
from app.pipeline.api_models import MarkOffset
from app.pipeline.engine import PipelineRuntime, WriterSlot
from app.pipeline.errors import PipelineNotRunning, WriterBusy
from app.pipeline.kafka_log import read_log_range
from app.pipeline.model import LogEntry
from app.pipeline.service import PipelineHost
from app.web.responses import parse_body

__all__ = [
    "DEFAULT_LOG_RANGE",
    "MAX_LOG_RANGE",
    "PipelineOperator",
    "entry_json",
    "log_range",
    "mark_offset",
    "writer_json",
]

MAX_LOG_RANGE = 1000  # entries one log view may return
DEFAULT_LOG_RANGE = 100


def entry_json(entry: LogEntry) -> dict[str, Any]:
    value = entry.value
    return {
        "offset": entry.offset,
        "timestamp_ms": entry.timestamp_ms,
        "mode": entry.mode.name.lower(),
        "key": entry.key,
        "value": {"op": value.op.value, "namespace": value.namespace, "data": value.data},
        "position": entry.position,
    }


def writer_json(slot: WriterSlot, end_offset: int) -> dict[str, Any]:
    state = slot.state
    return {
        "state": slot.phase,
        "offset": state.offset,
        "lag": max(end_offset - state.next_offset, 0),
        "stopped": not slot.running,
        "last_error": None if state.failed is None else state.failed.error,
        "failed": None if state.failed is None else state.failed.to_json(),
        "namespaces": dict(state.namespaces),
        "received": slot.received,
    }


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

    def summary(self) -> dict[str, Any]:
        runtime = self.host.runtime
        if runtime is None:
            writers = [{"name": w.name, "state": "starting"} for w in self.host.definition.writers]
            return {"name": self.name, "state": "starting", "writers": writers}
        return {
            "name": self.name,
            "state": "running",
            "writers": [
                {"name": n, "state": s.phase, "offset": s.state.offset} for n, s in runtime.slots.items()
            ],
        }

    async def status(self) -> dict[str, Any]:
        runtime = self._runtime()
        end = await self._end(runtime)
        return {
            "pipeline": self.name,
            "state": "running",
            "commit_log": {"topic": self.host.topics.log, "end_offset": end},
            "reader_done": runtime.flags.source_done,
            "reader_error": runtime.flags.source_error,
            "reader": {ns: r.to_json() for ns, r in sorted(runtime.readers.items())},
            "writers": {n: writer_json(s, end) for n, s in sorted(runtime.slots.items())},
        }

    async def offsets(self) -> dict[str, Any]:
        runtime = self._runtime()
        return {
            "pipeline": self.name,
            "end_offset": await self._end(runtime),
            "writers": {n: s.state.to_json() for n, s in sorted(runtime.slots.items())},
            "readers": {ns: r.to_json() for ns, r in sorted(runtime.readers.items())},
        }

    async def log(self, first: int, last: int) -> dict[str, Any]:
        runtime = self._runtime()
        settings = self.host.settings
        entries = await asyncio.to_thread(
            read_log_range, settings.bootstrap, self.host.topics.log, first, last
        )
        return {
            "pipeline": self.name,
            "from": first,
            "to": last,
            "end_offset": await self._end(runtime),
            "entries": [entry_json(e) for e in entries],
        }

    async def _writer_answer(self, runtime: PipelineRuntime, writer: str, **extra: Any) -> dict[str, Any]:
        slot = runtime.slot(writer)
        return {
            "pipeline": self.name,
            "writer": writer,
            **extra,
            **writer_json(slot, await self._end(runtime)),
        }

    async def pause(self, writer: str) -> dict[str, Any]:
        runtime = self._runtime()
        async with self._changing:
            changed = await runtime.pause(writer)
        return await self._writer_answer(runtime, writer, changed=changed)

    async def resume(self, writer: str) -> dict[str, Any]:
        runtime = self._runtime()
        runtime.slot(writer)  # UnknownWriter before anything changes
        async with self._changing:
            changed = bool(await runtime.resume(writer))
        return await self._writer_answer(runtime, writer, changed=changed)

    async def pause_all(self) -> dict[str, Any]:
        runtime = self._runtime()
        names = list(runtime.slots)
        async with self._changing:
            paused = await asyncio.gather(*(runtime.pause(n) for n in names))
        return {"pipeline": self.name, "paused": [n for n, p in zip(names, paused, strict=True) if p]}

    async def resume_all(self) -> dict[str, Any]:
        runtime = self._runtime()
        async with self._changing:
            resumed = await runtime.resume(None)
        return {"pipeline": self.name, "resumed": resumed}

    async def step(self, writer: str) -> dict[str, Any]:
        runtime = self._runtime()
        async with self._changing:
            if runtime.slot(writer).running:
                raise WriterBusy(
                    f"writer {writer} of pipeline {self.name} is running: pause it before a step"
                )
            result = await runtime.step(writer)
        return await self._writer_answer(
            runtime, writer, stepped=result["stepped"], ok=result.get("ok", True)
        )

    async def mark(self, writer: str, body: Any) -> dict[str, Any]:
        runtime = self._runtime()
        runtime.slot(writer)
        offset = mark_offset(body, await self._end(runtime))
        async with self._changing:
            await runtime.mark(writer, offset)
        return await self._writer_answer(runtime, writer)
