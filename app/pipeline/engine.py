"""The pipeline run loop (the Transporter design) over ports: one source appending to the commit log, one
task per writer reading the log from its own offset, bulk writes, interval flush of offsets,
stop-on-failure and one-at-a-time replay, the operator's step / mark / resume, and the dead-letter
queue of writers with `errors_tolerance: all`. A writer that is caught up takes the entries the log
just confirmed from memory (`LogTail`) instead of reading them back; otherwise it reads the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.errors import ConfigError
from app.pipeline.bulk import Bulk, DeadLettering, Sending, prepare_bulk, write_bulk
from app.pipeline.chain import Branch
from app.pipeline.errors import EntryTooLarge, UnknownWriter
from app.pipeline.model import LogEntry, NewEntry, entry_text
from app.pipeline.offsets import ReaderState, WriterState
from app.pipeline.ports import CommitLog, Cursor, DeadLetterQueue, Sink, Source, StateStore
from app.pipeline.tail import LogTail, TailCursor
from app.pipeline.tolerance import ErrorsTolerance

__all__ = ["PipelineRuntime", "WriterSlot"]

log = logging.getLogger(__name__)


APPENDS_IN_FLIGHT = 4  # commit-log appends started and not yet confirmed
WRITER_CHECK_S = 0.05  # a reader waiting for a writer looks again this often (the writer may stop)
TAIL_BATCHES = 8  # more keeps more objects alive for the garbage collector to walk
TAIL_MIN_ENTRIES = 2_000


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
    paused: bool = False  # by the operator: not restarted until resumed

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


class PipelineRuntime:
    def __init__(
        self,
        *,
        name: str,
        log_: CommitLog,
        store: StateStore,
        source: Source | None,
        writers: Mapping[str, tuple[Branch, Sink]],
        writer_states: Mapping[str, WriterState],
        reader_states: Mapping[str, ReaderState],
        batch_size: int = 1000,
        batch_wait_s: float = 0.2,
        flush_interval_s: float = 1.0,
        restart_after_s: float = 0.0,
        source_retry_s: float = 5.0,
        errors_tolerance: Mapping[str, ErrorsTolerance] | None = None,
        dead_letters: DeadLetterQueue | None = None,
        appends_in_flight: int = APPENDS_IN_FLIGHT,
    ) -> None:
        self.name = name
        self.log = log_
        self.store = store
        self.source = source
        self.slots = {
            n: WriterSlot(n, branch, sink, writer_states.get(n, WriterState()))
            for n, (branch, sink) in writers.items()
        }
        self.readers: dict[str, ReaderState] = dict(reader_states)
        self.dead_letters = dead_letters
        for name, tolerance in (errors_tolerance or {}).items():
            if tolerance is ErrorsTolerance.ALL:
                if dead_letters is None:
                    raise ConfigError(
                        f"pipeline {self.name}: writer {name} tolerates errors but has no dead-letter queue"
                    )
                self.slots[name].dead_letter = DeadLettering(self.name, name, dead_letters)
        self.batch_size = batch_size
        self.batch_wait_s = batch_wait_s
        self.flush_interval_s = flush_interval_s
        self.restart_after_s = restart_after_s
        self.source_retry_s = source_retry_s
        self.appends_in_flight = max(appends_in_flight, 1)
        self.flags = _Flags()
        self._source_task: asyncio.Task[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()
        # Enough for writers a few batches behind the reader; one further behind reads the log.
        self.tail = LogTail(max(batch_size * TAIL_BATCHES, TAIL_MIN_ENTRIES))
        self._writer_moved = asyncio.Event()  # a writer's offset moved (the reader may wait for it)

    # -- lifecycle -----------------------------------------------------------------
    async def start(self) -> None:
        await self._catch_up_reader_states()
        for slot in self.slots.values():
            self._start_writer(slot)
        if self.source is not None:
            self._source_task = asyncio.create_task(self._run_source(), name=f"pipeline-{self.name}-source")
        else:
            self.flags.source_done = True
        self._flusher = asyncio.create_task(self._run_flusher(), name=f"pipeline-{self.name}-flusher")

    async def stop(self, timeout_s: float = 30.0) -> None:
        """Clean shutdown: stop reading, give writers up to timeout_s to confirm, flush offsets."""
        self.flags.stopping = True
        if self._source_task is not None:
            self._source_task.cancel()
            await asyncio.gather(self._source_task, return_exceptions=True)
        tasks = [s.task for s in self.slots.values() if s.task is not None and not s.task.done()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        try:
            await self.flush(force=True)
        finally:
            await self.store.close()
        for slot in self.slots.values():
            with contextlib.suppress(Exception):
                await slot.sink.close()
        if self.source is not None:
            with contextlib.suppress(Exception):
                await self.source.close()
        if self.dead_letters is not None:
            with contextlib.suppress(Exception):
                await self.dead_letters.close()

    def failed_writers(self) -> list[str]:
        """Writers stopped by a failure (a bulk or replay their sink refused), by name."""
        return [n for n, s in self.slots.items() if not s.running and (s.state.failed or s.stopped_at)]

    async def idle(self) -> bool:
        """True when the source is finished and every writer is stopped or at the end of the log."""
        if not self.flags.source_done:
            return False
        end = await self.log.end_offset()
        return all(not s.running or s.state.next_offset >= end for s in self.slots.values())

    # -- offsets -------------------------------------------------------------------
    async def flush(self, force: bool = False) -> None:
        async with self._flush_lock:
            if not (self.flags.dirty or force):
                return
            self.flags.dirty = False
            writers = {n: s.state for n, s in self.slots.items()}
            try:
                await self.store.save(writers, dict(self.readers))
            except Exception as exc:
                self.flags.dirty = True
                log.warning("pipeline %s: offset flush failed, retrying: %s", self.name, describe(exc))
                if force:
                    raise

    async def _run_flusher(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            await self.flush()
            if self.restart_after_s > 0:
                now = time.monotonic()
                for slot in self.slots.values():
                    if (
                        not slot.running
                        and not slot.paused
                        and slot.stopped_at
                        and now - slot.stopped_at >= self.restart_after_s
                    ):
                        log.info(
                            "pipeline %s: restarting writer %s after %.0f s",
                            self.name,
                            slot.name,
                            self.restart_after_s,
                        )
                        self._start_writer(slot)

    # -- source --------------------------------------------------------------------
    async def _catch_up_reader_states(self) -> None:
        """Entries appended after the last flushed reader state still move the reader on."""
        if self.source is None:
            return
        start = min((r.log_offset for r in self.readers.values()), default=-1) + 1
        end = await self.log.end_offset()
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
                    self._advance_reader(entry)
                position = batch[-1].offset + 1
        finally:
            await cursor.close()

    def _advance_reader(self, entry: LogEntry) -> None:
        self.readers[entry.key] = self.readers.get(entry.key, ReaderState()).advanced(entry)
        self.flags.dirty = True

    async def _run_source(self) -> None:
        assert self.source is not None
        while not self.flags.stopping:
            appends: deque[asyncio.Task[None]] = deque()  # oldest first, each awaiting the one before
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
            try:
                return batch, await self.log.start_append(batch)
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
            LogEntry(o, n.message.timestamp_ms, n.mode, n.message.namespace, n.message, n.position, n.doc_key)
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
                    last.offset, last.timestamp_ms, last.mode, namespace, last.value, positions[namespace]
                )
            )

    # -- writers -------------------------------------------------------------------
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

    # -- operator ------------------------------------------------------------------
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
        return started

    async def pause(self, name: str, timeout_s: float = 30.0) -> bool:
        """Stop a writer after the bulks it has in flight are confirmed (so nothing is written twice);
        it keeps its offset and stays stopped until resumed. False when it was not running."""
        slot = self.slot(name)
        slot.paused = True
        if not slot.running:
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
