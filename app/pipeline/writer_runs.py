"""The writers' part of a running pipeline (`PipelineRuntime`, app.pipeline.engine): one task per
writer reading the log from its own offset (from the tail while it is caught up), bulks written
and confirmed oldest first, a failed bulk stopping the writer, and its failed range replayed one
message at a time. A writer with a `retry` replays a failed bulk at once, each record's write
tried as its retry says before its tolerance decides (app.pipeline.tolerance)."""

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
from app.pipeline.tolerance import Failure, Stage

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
        """Writes from the writer's offset; with a retry, a failed bulk sends it round again into the
        one-at-a-time replay instead of stopping it."""
        while True:
            await self._write_from_offset(slot)
            # round again only after a failed bulk of a retrying writer (not after its replay gave up)
            if slot.retry is None or slot.state.failed is None or slot.stopped_at is not None:
                return
            if self.flags.stopping or slot.paused:
                return

    async def _write_from_offset(self, slot: WriterSlot) -> None:
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
            if slot.retry is not None:
                log.warning(
                    "pipeline %s: writer %s: bulk write of log offsets %d-%d failed, replaying it one "
                    "record at a time: %s",
                    self.name, slot.name, bulk.first, bulk.last, describe(error),
                )  # fmt: skip
                return False
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
        """One message; with errors_tolerance all a transform or conversion failure dead-letters it.
        A write the sink refuses is tried again as the writer's retry says; then it stops the writer,
        or (errors_tolerance all, with a retry) goes to the dead-letter topic."""
        tries = slot.retry.attempts if slot.retry is not None else 1
        for attempt in range(1, tries + 1):
            try:
                written = await self._write_entry(slot, entry)
                break
            except Exception as exc:
                if self.flags.stopping:  # left as it is: the next run replays it
                    return False
                if attempt < tries:
                    assert slot.retry is not None
                    await asyncio.sleep(slot.retry.backoff_s(attempt))  # backoff before the next try
                    continue
                if slot.retry is not None and slot.dead_letter is not None:
                    await slot.dead_letter([Failure(entry, Stage.WRITE, None, exc)])
                    written = 0
                    break
                slot.state = slot.state.replay_failed(entry.offset, describe(exc))
                self._stopped(
                    slot,
                    f"writer {slot.name}: replay of {self.name} log offset={entry.offset} failed"
                    f"{f' {tries} times' if tries > 1 else ''}; stopped at offset={slot.state.offset}; "
                    f"message={entry_text(entry)}; error={describe(exc)}",
                )
                await self.flush(force=False)
                return False
        slot.received += written
        slot.state = slot.state.replayed(entry.offset, entry.key)
        self.flags.dirty = True
        return True

    async def _write_entry(self, slot: WriterSlot, entry: LogEntry) -> int:
        """Writes one entry; how many messages reached the sink (0: filtered, a command, or
        dead-lettered by the tolerance)."""
        if slot.dead_letter is not None:
            bulk = await prepare_bulk(slot.branch, slot.sink, [entry], slot.dead_letter)
            await write_bulk(slot.sink, bulk, object())
            return bulk.count
        message = None if entry.is_command else slot.branch.apply(entry.value)
        if message is not None:
            await slot.sink.write([message])
        return int(message is not None)

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
