"""The pipeline run loop (the Transporter design) over ports: one source appending to the commit log, one
task per writer reading the log from its own offset, bulk writes, interval flush of offsets,
stop-on-failure and one-at-a-time replay, the operator's step / mark / resume, and the dead-letter
queue of writers with `errors_tolerance: all`. A writer that is caught up takes the entries the log
just confirmed from memory (`LogTail`) instead of reading them back; otherwise it reads the log.

The runtime's parts, each a class it inherits: the source's appends to the commit log
(app.pipeline.source_appends), the writers' runs (app.pipeline.writer_runs) and the operator's
controls (app.pipeline.writer_controls); what they share is in app.pipeline.runtime_parts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from app.errors import ConfigError
from app.pipeline.bulk import DeadLettering
from app.pipeline.chain import Branch
from app.pipeline.offsets import ReaderState, WriterState
from app.pipeline.ports import CommitLog, DeadLetterQueue, Sink, Source, StateStore
from app.pipeline.runtime_parts import WriterSlot, _Flags, describe
from app.pipeline.source_appends import SourceAppends
from app.pipeline.tail import LogTail
from app.pipeline.tolerance import ErrorsTolerance, WriteRetry
from app.pipeline.writer_controls import WriterControls
from app.pipeline.writer_runs import WriterRuns

__all__ = ["PipelineRuntime", "WriterSlot"]

log = logging.getLogger(__name__)


APPENDS_IN_FLIGHT = 4  # commit-log appends started and not yet confirmed
TAIL_BATCHES = 8  # more keeps more objects alive for the garbage collector to walk
TAIL_MIN_ENTRIES = 2_000


class PipelineRuntime(SourceAppends, WriterRuns, WriterControls):
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
        write_retries: Mapping[str, WriteRetry] | None = None,
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
        for name, retry in (write_retries or {}).items():
            self.slots[name].retry = retry
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
        self._next_seq = 1  # set from the reader states before the source reads

    # -- lifecycle -----------------------------------------------------------------
    async def start(self) -> None:
        await self._catch_up_reader_states()
        for slot in self.slots.values():
            if not slot.paused:  # paused before a restart: stays so until resumed
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
