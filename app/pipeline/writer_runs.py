"""The writers' part of a running pipeline (`PipelineRuntime`, app.pipeline.engine): one task per
writer reading the log from its own offset (from the tail while it is caught up), bulks written
and confirmed oldest first, a failed bulk stopping the writer, and its failed range replayed one
message at a time."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import TYPE_CHECKING

from app.pipeline.bulk import Bulk, Sending, prepare_bulk, write_bulk
from app.pipeline.model import LogEntry, entry_text
from app.pipeline.ports import CommitLog, Cursor
from app.pipeline.runtime_parts import WriterSlot, _Flags, describe
from app.pipeline.tail import LogTail, TailCursor

__all__ = ["WriterRuns"]

log = logging.getLogger(__name__)


class WriterRuns:
    """The writers' part of `PipelineRuntime` (which sets these attributes)."""

    name: str
    log: CommitLog
    batch_size: int
    batch_wait_s: float
    flags: _Flags
    tail: LogTail
    _writer_moved: asyncio.Event

    if TYPE_CHECKING:  # other parts' methods (stubs left at run time would hide them)

        async def flush(self, force: bool = False) -> None: ...

    def _start_writer(self, slot: WriterSlot) -> None:
        if slot.running:
            return
        slot.stopped_at = None
        slot.task = asyncio.create_task(self._run_writer(slot), name=f"pipeline-{self.name}-{slot.name}")

    def _stopped(self, slot: WriterSlot, text: str) -> None:
        slot.stopped_at = time.monotonic()
        self.flags.dirty = True
        self.flags.events.append(text)
        log.error("pipeline %s: %s", self.name, text)

    def _cursor(self, slot: WriterSlot) -> Cursor:
        """Writers with transforms read the log: the tail's messages are shared between writers."""
        if slot.branch.transforms:
            return self.log.cursor(slot.state.next_offset)
        return TailCursor(self.log, self.tail, slot.state.next_offset)

    async def _run_writer(self, slot: WriterSlot) -> None:
        cursor = self._cursor(slot)
        fetching: asyncio.Task[list[LogEntry]] | None = None
        sending = Sending(slot.sink, functools.partial(self._confirmed, slot))
        try:
            if slot.state.failed is not None and not await self._replay(slot, cursor):
                return
            # The next batch is read and prepared while the sink writes; the offset moves past a bulk
            # only once it is confirmed, oldest first. An unconfirmed bulk is read again next time.
            fetching = asyncio.create_task(cursor.next_batch(self.batch_size, self.batch_wait_s))
            while not self.flags.stopping and not slot.paused:
                batch = await fetching
                fetching = asyncio.create_task(cursor.next_batch(self.batch_size, self.batch_wait_s))
                if batch:
                    bulk = await prepare_bulk(slot.branch, slot.sink, batch, slot.dead_letter)
                    if not await sending.send(bulk):
                        return
                elif sending.failed():
                    return
            await sending.drain()
        finally:
            if fetching is not None and not fetching.done():
                fetching.cancel()
                await asyncio.gather(fetching, return_exceptions=True)
            await sending.cancel()
            await cursor.close()

    async def _write_bulk(self, slot: WriterSlot, batch: list[LogEntry]) -> bool:
        sending = Sending(slot.sink, functools.partial(self._confirmed, slot))
        bulk = await prepare_bulk(slot.branch, slot.sink, batch, slot.dead_letter)
        return await sending.send(bulk) and await sending.drain()

    async def _confirmed(self, slot: WriterSlot, bulk: Bulk, error: Exception | None) -> bool:
        """The offset moves past a confirmed bulk; a failed one stops the writer and is replayed later."""
        if error is not None:
            slot.state = slot.state.bulk_failed(bulk.first, bulk.last, describe(error))
            self._stopped(
                slot,
                f"writer {slot.name}: bulk write of {self.name} log offsets {bulk.first}-{bulk.last} "
                f"failed; stopped at offset={slot.state.offset}: {describe(error)}",
            )
            await self.flush(force=False)
            return False
        slot.received += bulk.count
        slot.state = slot.state.confirmed(bulk.last, bulk.namespaces.items())
        self.flags.dirty = True
        self._writer_moved.set()
        return True

    async def _write_one(self, slot: WriterSlot, entry: LogEntry) -> bool:
        """One message; with errors_tolerance all a transform or conversion failure dead-letters it,
        but a write the sink refuses stops the writer either way."""
        try:
            if slot.dead_letter is not None:
                bulk = await prepare_bulk(slot.branch, slot.sink, [entry], slot.dead_letter)
                await write_bulk(slot.sink, bulk, object())
                written: int = bulk.count
            else:
                message = None if entry.is_command else slot.branch.apply(entry.value)
                if message is not None:
                    await slot.sink.write([message])
                written = message is not None
        except Exception as exc:
            slot.state = slot.state.replay_failed(entry.offset, describe(exc))
            self._stopped(
                slot,
                f"writer {slot.name}: replay of {self.name} log offset={entry.offset} failed; "
                f"stopped at offset={slot.state.offset}; message={entry_text(entry)}; "
                f"error={describe(exc)}",
            )
            await self.flush(force=False)
            return False
        slot.received += written
        slot.state = slot.state.replayed(entry.offset, entry.key)
        self.flags.dirty = True
        return True

    async def _replay(self, slot: WriterSlot, cursor: Cursor) -> bool:
        """Seed "Message Failures": the failed range again, ONE message at a time."""
        while slot.state.failed is not None and not self.flags.stopping and not slot.paused:
            batch = await cursor.next_batch(1, self.batch_wait_s)
            if not batch:
                continue
            entry = batch[0]
            if entry.offset > slot.state.failed.last:  # gap (compaction): the range is done
                slot.state = slot.state.replayed(slot.state.failed.last)
                return await self._write_bulk(slot, batch)
            if not await self._write_one(slot, entry):
                return False
        return slot.state.failed is None
