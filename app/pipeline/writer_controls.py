"""The operator's part of a running pipeline (`PipelineRuntime`, app.pipeline.engine): pause,
resume, mark and step a writer, and the runtime's status; app.pipeline.operator serves them over
the pipeline process's HTTP API."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from app.pipeline.errors import UnknownWriter
from app.pipeline.model import LogEntry
from app.pipeline.offsets import ReaderState, WriterState
from app.pipeline.ports import CommitLog
from app.pipeline.runtime_parts import WriterSlot, _Flags

__all__ = ["WriterControls"]

log = logging.getLogger(__name__)


class WriterControls:
    """The operator's part of `PipelineRuntime` (which sets these attributes)."""

    name: str
    log: CommitLog
    slots: dict[str, WriterSlot]
    readers: dict[str, ReaderState]
    flags: _Flags

    if TYPE_CHECKING:  # other parts' methods (stubs left at run time would hide them)

        async def flush(self, force: bool = False) -> None: ...
        def _start_writer(self, slot: WriterSlot) -> None: ...
        async def _write_one(self, slot: WriterSlot, entry: LogEntry) -> bool: ...

    def slot(self, name: str) -> WriterSlot:
        if name not in self.slots:
            raise UnknownWriter(f"pipeline {self.name} has no writer {name!r}")
        return self.slots[name]

    async def _halt(self, slot: WriterSlot) -> bool:
        """Stop a running writer (an unconfirmed write is simply redelivered later)."""
        if not slot.running:
            return False
        assert slot.task is not None
        slot.task.cancel()
        await asyncio.gather(slot.task, return_exceptions=True)
        return True

    async def resume(self, name: str | None = None) -> list[str]:
        started = []
        for slot in self.slots.values():
            if (name is None or slot.name == name) and not slot.running:
                slot.paused = False
                self._start_writer(slot)
                started.append(slot.name)
        if started:
            self.flags.dirty = True  # the resume outlives a restart too
        return started

    async def pause(self, name: str, timeout_s: float = 30.0) -> bool:
        """Stop a writer after the bulks it has in flight are confirmed (so nothing is written twice);
        it keeps its offset and stays stopped until resumed. False when it was not running."""
        slot = self.slot(name)
        slot.paused = True
        self.flags.dirty = True
        if not slot.running:
            await self.flush()  # kept across a restart
            return False
        assert slot.task is not None
        _, pending = await asyncio.wait([slot.task], timeout=timeout_s)
        if pending:  # a sink that does not answer: its unconfirmed bulk is redelivered on resume
            await self._halt(slot)
        self.flags.dirty = True
        await self.flush()
        log.warning(
            "pipeline %s: writer %s paused at offset=%d by the operator", self.name, name, slot.state.offset
        )
        return True

    async def mark(self, name: str, offset: int) -> WriterState:
        slot = self.slot(name)
        was_running = await self._halt(slot)
        slot.state = slot.state.marked(offset)
        self.flags.dirty = True
        await self.flush(force=True)
        log.warning("pipeline %s: writer %s marked at offset=%d by the operator", self.name, name, offset)
        if was_running:
            self._start_writer(slot)
        return slot.state

    async def step(self, name: str, wait_s: float = 5.0) -> dict[str, Any]:
        """Process exactly one message (the writer's next offset) one at a time; stops the writer first."""
        slot = self.slot(name)
        await self._halt(slot)
        slot.stopped_at = slot.stopped_at or time.monotonic()
        cursor = self.log.cursor(slot.state.next_offset)
        try:
            batch = await cursor.next_batch(1, wait_s)
        finally:
            await cursor.close()
        if not batch:
            return {"writer": name, "offset": slot.state.offset, "stepped": None}
        ok = await self._write_one(slot, batch[0])
        await self.flush(force=True)
        return {"writer": name, "offset": slot.state.offset, "stepped": batch[0].offset, "ok": ok}

    def status(self) -> dict[str, Any]:
        return {
            "pipeline": self.name,
            "source_done": self.flags.source_done,
            "source_error": self.flags.source_error,
            "source_refused": self.flags.source_refused,
            "writers": {
                n: {
                    **s.state.to_json(),
                    "running": s.running,
                    "received": s.received,
                    "dead_lettered": s.dead_letter.count if s.dead_letter else 0,
                }
                for n, s in self.slots.items()
            },
            "readers": {ns: r.to_json() for ns, r in self.readers.items()},
        }
