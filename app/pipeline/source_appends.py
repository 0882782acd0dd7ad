"""The source part of a running pipeline (`PipelineRuntime`, app.pipeline.engine): the source's
batches appended to the commit log, a few appends in flight at once and confirmed in order, each
namespace's reader state moved once the log confirmed its entries, and the reader held back to
what the tail holds for the writers it feeds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any

from app.pipeline.errors import EntryTooLarge
from app.pipeline.model import LogEntry, NewEntry
from app.pipeline.offsets import ReaderState
from app.pipeline.ports import CommitLog, Source
from app.pipeline.runtime_parts import WriterSlot, _Flags, describe
from app.pipeline.tail import LogTail

__all__ = ["SourceAppends"]

log = logging.getLogger(__name__)

WRITER_CHECK_S = 0.05  # a reader waiting for a writer looks again this often (the writer may stop)


class SourceAppends:
    """The source part of `PipelineRuntime` (which sets these attributes)."""

    name: str
    log: CommitLog
    source: Source | None
    slots: dict[str, WriterSlot]
    readers: dict[str, ReaderState]
    batch_size: int
    source_retry_s: float
    appends_in_flight: int
    flags: _Flags
    tail: LogTail
    _writer_moved: asyncio.Event
    _next_seq: int  # the append order the next entry gets

    async def _catch_up_reader_states(self) -> None:
        """Entries appended after the last flushed reader state still move the reader on, but only
        those continuing the append order: a batch the log refused while later ones in flight were
        confirmed leaves a hole, and the entries after it wait for the reader to read the hole's
        entries again (they come again, with the entries after them: at least once, nothing
        skipped). Entries of an older version (no order) move it as they always did."""
        if self.source is None:
            return
        start = min((r.log_offset for r in self.readers.values()), default=-1) + 1
        end = await self.log.end_offset()
        self._next_seq = self._last_seq() + 1
        if start >= end:
            return
        cursor = self.log.cursor(start)
        try:
            position = start
            while position < end:
                batch = await cursor.next_batch(self.batch_size * 10, 5.0)
                if not batch:
                    break
                for entry in batch:
                    if entry.seq == 0 or entry.seq == self._next_seq:
                        self._advance_reader(entry)
                        self._next_seq = max(self._next_seq, entry.seq + 1)
                position = batch[-1].offset + 1
        finally:
            await cursor.close()

    def _last_seq(self) -> int:
        """The append order of the last entry that moved a reader state (every one before it did)."""
        return max((r.seq for r in self.readers.values()), default=0)

    def _advance_reader(self, entry: LogEntry) -> None:
        self.readers[entry.key] = self.readers.get(entry.key, ReaderState()).advanced(entry)
        self.flags.dirty = True

    async def _run_source(self) -> None:
        assert self.source is not None
        while not self.flags.stopping:
            appends: deque[asyncio.Task[None]] = deque()  # oldest first, each awaiting the one before
            self._next_seq = self._last_seq() + 1  # the reader reads on from its states
            try:
                await self.log.prepare_append()  # a log not reachable yet is tried again, as a read is
                async for batch in self.source.read(dict(self.readers)):
                    if batch:
                        await self._settle(appends, self.appends_in_flight - 1)
                        await self._keep_within_tail()
                        previous = appends[-1] if appends else None
                        batch, confirmed = await self._start_append(batch)
                        if confirmed is not None:
                            appends.append(
                                asyncio.create_task(self._confirmed_append(batch, confirmed, previous))
                            )
                await self._settle(appends, 0)
                self.flags.source_done = True
                self.flags.source_error = None
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.flags.source_error = describe(exc)
                log.error(
                    "pipeline %s: reader failed, retrying in %.0f s: %s",
                    self.name,
                    self.source_retry_s,
                    describe(exc),
                )
                # Appends started before the failure may still be confirmed: their reader states count.
                await asyncio.gather(*appends, return_exceptions=True)
                await asyncio.sleep(self.source_retry_s)
            finally:
                for task in appends:
                    task.cancel()
                await asyncio.gather(*appends, return_exceptions=True)

    def _tail_lag(self) -> int | None:
        """How far the tail's end is ahead of the most advanced running writer fed from it (by its
        confirmed offset); None when no such writer holds a position in the tail."""
        end = self.tail.end
        offsets = [
            s.state.next_offset
            for s in self.slots.values()
            if s.running and not s.branch.transforms and self.tail.holds(s.state.next_offset)
        ]
        return None if end is None or not offsets else end - max(offsets)

    async def _keep_within_tail(self) -> None:
        """The reader runs ahead of the most advanced tail-fed writer only as far as the tail holds
        (counting the appends in flight): further ahead, that writer would read back from the log what
        memory no longer holds, more work on the same GIL than the reader saves. A slower writer falls
        behind and reads the log; a writer that stops no longer counts."""
        limit = max(self.tail.capacity - self.appends_in_flight * self.batch_size, self.batch_size)
        while (lag := self._tail_lag()) is not None and lag > limit:
            self._writer_moved.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._writer_moved.wait(), WRITER_CHECK_S)

    @staticmethod
    async def _settle(appends: deque[asyncio.Task[None]], keep: int) -> None:
        """Finished appends are taken off (a failed one raises); then wait until at most `keep` remain.
        After a failure, the appends left are all later ones: they fail too (see _confirmed_append)."""
        while appends and (appends[0].done() or len(appends) > keep):
            await appends.popleft()

    async def _start_append(
        self, batch: list[NewEntry]
    ) -> tuple[list[NewEntry], Awaitable[list[int]] | None]:
        """Append the batch, less any entry larger than a commit-log record may be: each is
        logged, counted in the status (`source_refused`) and left out, and the rest appended; before,
        the append failed whole and the reader retried it for ever. None when nothing is left."""
        while batch:
            batch = [replace(entry, seq=self._next_seq + i) for i, entry in enumerate(batch)]
            try:
                confirmed = await self.log.start_append(batch)
            except EntryTooLarge as exc:
                entry = batch[exc.index]
                self.flags.source_refused += 1
                log.error(
                    "pipeline %s: reader: entry %s/%s at %s left out: %s (raise MAX_PAYLOAD_BYTES"
                    " to carry it)",
                    self.name,
                    entry.message.namespace,
                    entry.doc_key,
                    dict(entry.position),
                    exc,
                )
                batch = batch[: exc.index] + batch[exc.index + 1 :]
                continue
            self._next_seq += len(batch)
            return batch, confirmed
        return batch, None

    async def _confirmed_append(
        self, batch: list[NewEntry], confirmed: Awaitable[list[int]], previous: asyncio.Task[None] | None
    ) -> None:
        """Once the log confirmed this batch and every earlier one, in append order: each namespace's
        reader state moves to its last entry and the tail gets the entries. A failed earlier append
        fails this one too (raises), so nothing after a gap moves a reader state."""
        offsets = await confirmed
        if previous is not None:
            await previous
        entries = [
            LogEntry(
                o,
                n.message.timestamp_ms,
                n.mode,
                n.message.namespace,
                n.message,
                n.position,
                n.doc_key,
                n.seq,
            )
            for n, o in zip(batch, offsets, strict=True)
        ]
        self.tail.add(entries)
        # Each namespace's reader state moves to its last entry, with the positions of all its entries.
        positions: dict[str, dict[str, Any]] = {}
        lasts: dict[str, LogEntry] = {}
        for entry in entries:
            namespace = entry.key
            if namespace in positions:
                positions[namespace].update(entry.position)
            else:
                positions[namespace] = dict(entry.position)
            lasts[namespace] = entry
        for namespace, last in lasts.items():
            self._advance_reader(
                LogEntry(
                    last.offset,
                    last.timestamp_ms,
                    last.mode,
                    namespace,
                    last.value,
                    positions[namespace],
                    seq=last.seq,
                )
            )
